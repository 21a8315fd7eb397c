# build_dir.sh - is a build folder this tree's? Sourced by scripts/build.sh
# (and by tests/integration/install/test_build_dir.sh, which feeds it fake caches).
#
# A build folder copied with its tree (cp -a) or pointed at from another
# checkout keeps, in CMakeCache.txt, the source and build paths it was
# configured for: CMake then refuses to configure it here, and its Makefiles
# build the other tree. build.sh asks kvs_build_dir_foreign, and when it
# answers, removes what CMake generated (kvs_build_dir_reset) and configures
# again.

# kvs_build_dir_foreign BUILD_DIR SOURCE_DIR: succeed, printing why, when
# BUILD_DIR/CMakeCache.txt was made for another source folder or in another
# build folder; fail when it is this tree's, or when there is no cache.
kvs_build_dir_foreign() {
	local cache=$1/CMakeCache.txt src build home dir

	[[ -f $cache ]] || return 1
	src=$(cd "$2" && pwd -P) || return 1
	build=$(cd "$1" && pwd -P) || return 1
	home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
	dir=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$cache")
	# CMake may record a path through a symbolic link: compare where both
	# lead (a recorded folder that is gone leads nowhere).
	[[ -n $home ]] && home=$(cd "$home" 2>/dev/null && pwd -P || echo "$home")
	[[ -n $dir ]] && dir=$(cd "$dir" 2>/dev/null && pwd -P || echo "$dir")
	if [[ $home != "$src" ]]; then
		printf 'it was configured for the source folder %s, not %s\n' \
			"${home:-(none)}" "$src"
	elif [[ $dir != "$build" ]]; then
		printf 'it was configured as the build folder %s, not %s\n' \
			"${dir:-(none)}" "$build"
	else
		return 1
	fi
}

# kvs_build_dir_reset BUILD_DIR: remove what CMake generated there (the cache,
# every CMakeFiles folder with the objects and dependency files in it, the
# Makefiles and install scripts), so that the next configure starts clean.
# Built programs stay until the build relinks them.
kvs_build_dir_reset() {
	find "$1" \( -name CMakeFiles -type d -prune -exec rm -rf {} + \) -o \
		\( -type f \( -name CMakeCache.txt -o -name Makefile -o \
		-name cmake_install.cmake -o -name CTestTestfile.cmake -o \
		-name .kvs-configure-args \) -exec rm -f {} + \)
}

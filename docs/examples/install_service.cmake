# install_service.cmake - the part of `cmake --install` that installs the
# systemd unit (kvshared.service.in) and the sample config (kvshared.conf).
# CMakeLists.txt sets KVS_EXAMPLES, KVS_UNIT_OUT and the install folders
# KVS_BINDIR, KVS_SYSCONFDIR, KVS_UNITDIR (relative to the prefix, or
# absolute) before including it. The paths are resolved here, at install
# time, so that the unit names the kvshared and the config of the prefix
# installed to (`cmake --install build --prefix P` included). A config
# already installed there is kept: it may hold an operator's edits.

function(kvs_install_path out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

kvs_install_path(KVS_UNIT_BINDIR "${KVS_BINDIR}")
kvs_install_path(kvs_conf_dir "${KVS_SYSCONFDIR}/kvshare")
kvs_install_path(kvs_unit_dir "${KVS_UNITDIR}")
set(KVS_UNIT_CONFIG "${kvs_conf_dir}/kvshared.conf")

configure_file("${KVS_EXAMPLES}/kvshared.service.in" "${KVS_UNIT_OUT}" @ONLY)
file(INSTALL "${KVS_UNIT_OUT}" DESTINATION "${kvs_unit_dir}")
if(EXISTS "$ENV{DESTDIR}${KVS_UNIT_CONFIG}")
  message(STATUS "Kept: $ENV{DESTDIR}${KVS_UNIT_CONFIG} (already installed)")
else()
  file(INSTALL "${KVS_EXAMPLES}/kvshared.conf" DESTINATION "${kvs_conf_dir}")
endif()

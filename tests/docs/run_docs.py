#!/usr/bin/env python3
"""run_docs.py - the doc test: the examples in README.md and docs/*.md run as
written.

    run_docs.py --kind shell|python|flags --source DIR --build DIR [FILE...]

Every fenced block is read. One whose info string's first word is sh, bash
or console (--kind shell) or python (--kind python) is run, unless a word of
its info string is `excerpt` (```` ```sh excerpt ````: a fragment, or
something a test cannot do: the test command itself, apt-get, a package
index, an install to system paths, a server that runs until stopped).

Blocks run from the repository root, as the docs write them (build/kvsctl,
./scripts/...), each in its own process group with a deadline (--timeout),
against one kvshared that this script starts on the default socket the docs
use: XDG_RUNTIME_DIR, HOME and TMPDIR are a scratch directory's, so that
`kvsctl stats` with no --socket reaches it. The build's programs come first
on PATH. Shell blocks run with `bash -e`; a console block runs its `$ `
lines. Python blocks run with the shared venv's interpreter
(~/.cache/kvshare/vllm-venv/bin/python, or $KVS_DOCS_PYTHON), with
PYTHONPATH=client/python and KVSHARE_LIB=<build>/libkvshare.so; without that
venv they are skipped (exit 77 when nothing else ran), and so is a block
that imports a module the venv lacks (other than kvshare).

--kind flags runs nothing: in every fenced block, excerpts included, and in
every inline code span that starts with kvshared, kvsctl or kvsbench, each
option given to one of them must be in its --help (kvsctl's and kvsbench's
with the command's own --help).

Prints each block's fate (file:line), then the failures with their output,
then one summary line. Exit: 0 pass, 1 a block failed, 77 nothing to run.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KINDS = {"sh": "shell", "bash": "shell", "console": "shell", "python": "python"}
PROGRAMS = ("kvshared", "kvsctl", "kvsbench")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


class Block:
    def __init__(self, path, line, info, text):
        self.path = path          # as given (relative to the source root)
        self.line = line          # the opening fence's line, from 1
        self.words = info.split()
        self.lang = self.words[0] if self.words else ""
        self.text = text

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def excerpt(self):
        return "excerpt" in self.words


def read_blocks(src, path):
    """The fenced blocks of one Markdown file (CommonMark fences)."""
    out = []
    lines = open(os.path.join(src, path), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        close = re.compile(r"^\s{0,3}" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence))
        body = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            # a fence indented (in a list item) indents its body as much
            body.append(lines[j][indent:] if not lines[j][:indent].strip() else lines[j].lstrip())
            j += 1
        out.append(Block(path, i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return out


def doc_files(src, given):
    if given:
        return given
    return ["README.md"] + sorted(os.path.relpath(p, src)
                                  for p in glob.glob(os.path.join(src, "docs", "*.md")))


def console_script(text):
    """The commands of a console block: its `$ ` lines and their
    backslash continuations; the rest is output."""
    out, cont = [], False
    for line in text.split("\n"):
        if cont:
            out.append(line)
        elif line.startswith("$ "):
            out.append(line[2:])
        else:
            continue
        cont = line.endswith("\\")
    return "\n".join(out) + "\n"


class Daemon:
    """The kvshared the blocks talk to, on the default socket of env."""

    def __init__(self, build, env, scratch):
        self.argv = [os.path.join(build, "kvshared"), "--host-size", "256M",
                     "--gpu", "off"]
        self.env = env
        self.log = os.path.join(scratch, "kvshared.log")
        self.proc = None

    def start(self):
        r, w = os.pipe()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv + ["--ready-fd", str(w)],
                                         env=self.env, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, pass_fds=(w,),
                                         start_new_session=True)
        os.close(w)
        with os.fdopen(r) as ready:
            line = ready.readline()     # EOF when it exits first
        if "READY" not in line:
            self.proc.wait()
            sys.exit(f"run_docs: kvshared did not start:\n{self.tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n=20):
        try:
            lines = open(self.log, errors="replace").read().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


# What a block that is not marked excerpt must not do to the machine the
# test runs on: these names come first on PATH and fail, saying so (and pip
# refuses to install outside a venv: PIP_REQUIRE_VIRTUALENV).
GUARDED = ("pip", "pip3", "sudo", "apt-get", "apt", "systemctl")


def guard_shims(scratch):
    d = os.path.join(scratch, "guard")
    os.mkdir(d)
    for name in GUARDED:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho 'run_docs: the block runs {name}, which changes the "
                    f"machine: mark it excerpt' >&2\nexit 1\n")
        os.chmod(path, 0o755)
    return d


def last_lines(text, n=60):
    lines = text.rstrip("\n").split("\n")
    cut = [f"... ({len(lines) - n} lines before)"] if len(lines) > n else []
    return cut + lines[-n:]


def run_block(argv, env, cwd, timeout):
    """(status or None on timeout, output, seconds); the block's process
    group is killed afterwards, so that what it left running goes too."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        status = p.returncode
    except subprocess.TimeoutExpired:
        status = None
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if status is None:
        out, _ = p.communicate()
    return status, out.decode(errors="replace"), time.monotonic() - t0


def missing_module(out):
    """The module a python block could not import, unless it is ours."""
    m = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'\s*$", out)
    if m and m.group(1).split(".")[0] != "kvshare":
        return m.group(1)
    return None


def scratch_env(scratch, src, build, kind):
    """The blocks' environment: HOME, XDG_RUNTIME_DIR (the default socket's
    folder) and TMPDIR in scratch, the guards and the build first on PATH."""
    env = dict(os.environ)
    for d in ("home", "run", "tmp"):
        os.mkdir(os.path.join(scratch, d), 0o700)
    shims = guard_shims(scratch)
    env.update(HOME=os.path.join(scratch, "home"),
               XDG_RUNTIME_DIR=os.path.join(scratch, "run"),
               TMPDIR=os.path.join(scratch, "tmp"),
               PIP_REQUIRE_VIRTUALENV="true",
               PATH=os.pathsep.join((shims, build, env.get("PATH", ""))))
    for k in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "KVSHARE_LIB"):
        env.pop(k, None)
    if kind == "python":
        env.update(PYTHONPATH=os.path.join(src, "client", "python"),
                   KVSHARE_LIB=os.path.join(build, "libkvshare.so"))
    return env


def report_failures(failures):
    for b, why, out, log in failures:
        print(f"\nFAIL {b.where} ({b.lang}, {why}); the block:")
        print("".join("  | " + l + "\n" for l in b.text.rstrip("\n").split("\n")), end="")
        print("its output:")
        print("".join("  > " + l + "\n" for l in last_lines(out)), end="")
        print("kvshared's last lines:\n" + log)


def sanitized(build):
    """Whether @build was configured with KVS_SANITIZE."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return any(line.strip() == "KVS_SANITIZE:BOOL=ON" for line in f)
    except OSError:
        return False


def run_blocks(args, blocks):
    src = os.path.abspath(args.source)
    build = os.path.abspath(args.build)
    python = os.environ.get("KVS_DOCS_PYTHON") or os.path.expanduser(
        "~/.cache/kvshare/vllm-venv/bin/python")
    todo = [b for b in blocks if KINDS.get(b.lang) == args.kind]
    counts = {"passed": 0, "failed": 0, "excerpt": 0, "skipped": 0}
    failures = []
    skip_all = None
    if args.kind == "python" and not os.access(python, os.X_OK):
        skip_all = f"{python} is absent (scripts/python_env.sh makes it)"
    elif args.kind == "python" and sanitized(build):
        # The interpreter cannot load a library built with ASan (its
        # runtime must come first); the plain build and the Python step
        # run these blocks.
        skip_all = f"{build}'s libkvshare is built with the sanitizers"

    scratch = tempfile.mkdtemp(prefix="kvsdocs-")
    env = scratch_env(scratch, src, build, args.kind)
    daemon = Daemon(build, env, scratch)
    try:
        for b in todo:
            if b.excerpt:
                counts["excerpt"] += 1
                print(f"docs: {b.where} {b.lang}: excerpt")
                continue
            if skip_all:
                counts["skipped"] += 1
                print(f"docs: {b.where} {b.lang}: skipped: {skip_all}")
                continue
            if not daemon.alive():
                daemon.start()
            text = console_script(b.text) if b.lang == "console" else b.text
            script = os.path.join(scratch, "block")
            with open(script, "w") as f:
                f.write(text)
            argv = [python, script] if args.kind == "python" else ["bash", "-e", script]
            status, out, secs = run_block(argv, env, src, args.timeout)
            if args.kind == "python" and status and missing_module(out):
                counts["skipped"] += 1
                print(f"docs: {b.where} {b.lang}: skipped: the venv has no module "
                      f"{missing_module(out)!r}")
            elif status == 0:
                counts["passed"] += 1
                print(f"docs: {b.where} {b.lang}: ok ({secs:.1f} s)")
            else:
                counts["failed"] += 1
                why = (f"timed out after {args.timeout} s" if status is None
                       else f"exit status {status}")
                print(f"docs: {b.where} {b.lang}: FAILED ({why})")
                failures.append((b, why, out, daemon.tail(5)))
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    report_failures(failures)
    ran = counts["passed"] + counts["failed"]
    print(f"docs ({args.kind}): {ran} blocks ran, {counts['passed']} passed, "
          f"{counts['failed']} failed; {counts['excerpt']} excerpts; "
          f"{counts['skipped']} skipped")
    if counts["failed"]:
        return 1
    return 77 if ran == 0 and counts["skipped"] else 0


def help_text(build, prog, *cmd):
    p = subprocess.run([os.path.join(build, prog), *cmd, "--help"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    return p.stdout.decode(errors="replace")


def helps(build):
    """{program: (its --help, {command: the command's --help})}."""
    out = {}
    for prog in PROGRAMS:
        top = help_text(build, prog)
        cmds = {}
        if prog != "kvshared":
            section = top.split("\ncommands:\n", 1)[-1] if "\ncommands:\n" in top else ""
            for m in re.finditer(r"^  ([a-z][a-z-]*)\s", section, re.M):
                cmds[m.group(1)] = help_text(build, prog, m.group(1))
        out[prog] = (top, cmds)
    return out


def logical_lines(text):
    """A block's lines, backslash continuations joined, `$ ` prompts off."""
    out, cur, first = [], "", None
    for n, line in enumerate(text.split("\n")):
        if first is None:
            first = n
            line = line[2:] if line.startswith("$ ") else line
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((first, cur + line))
        cur, first = "", None
    return out


def tokens(line):
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:          # an unclosed quote (a JSON argument over lines)
        return line.split()


SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "(", ")", "2>", "&>"}
FLAG = re.compile(r"^\[?(--?[A-Za-z][A-Za-z0-9-]*)")


def invocations(line):
    """(program, [words after it]) for each kvshared/kvsctl/kvsbench the
    line runs, up to the next shell separator."""
    toks = tokens(line)
    for i, t in enumerate(toks):
        if os.path.basename(t.strip("\"'")) not in PROGRAMS or (i and toks[i - 1] in ("which", "cp")):
            continue
        words = []
        for w in toks[i + 1:]:
            if w in SEPARATORS or set(w) <= set("|&;<>()"):
                break
            words.append(w)
        yield os.path.basename(t.strip("\"'")), words


def unknown_flags(prog, words, table):
    top, cmds = table[prog]
    cmd = next((w for w in words if w in cmds), None)
    text = top + (cmds[cmd] if cmd else "")
    name = prog + (" " + cmd if cmd else "")
    for w in words:
        m = FLAG.match(w)
        if not m:
            continue
        flag = m.group(1)
        if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
            yield f"{name}: {flag} is not in `{name} --help`"


def inline_spans(src, path):
    """(line, text) of each inline code span outside fenced blocks."""
    inside = False
    for n, line in enumerate(open(os.path.join(src, path), encoding="utf-8"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            for m in re.finditer(r"`([^`\n]+)`", line):
                yield n, m.group(1)


def check_flags(args, files, blocks):
    src = os.path.abspath(args.source)
    table = helps(os.path.abspath(args.build))
    bad, seen = [], 0
    for b in blocks:
        for n, line in logical_lines(b.text):
            for prog, words in invocations(line):
                seen += 1
                bad += [f"{b.path}:{b.line + 1 + n}: {e}" for e in unknown_flags(prog, words, table)]
    for path in files:
        for n, span in inline_spans(src, path):
            first = span.split()[0] if span.split() else ""
            if os.path.basename(first) in PROGRAMS:
                for prog, words in invocations(span):
                    seen += 1
                    bad += [f"{path}:{n}: {e}" for e in unknown_flags(prog, words, table)]
    for e in bad:
        print(f"FAIL {e}")
    print(f"docs (flags): {seen} invocations of {', '.join(PROGRAMS)} checked, "
          f"{len(bad)} options not in their --help")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=("shell", "python", "flags"), required=True)
    ap.add_argument("--source", required=True, help="the repository root")
    ap.add_argument("--build", required=True, help="the build folder (kvshared, kvsctl, ...)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds a block may run")
    ap.add_argument("files", nargs="*", help="Markdown files, relative to --source")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    files = doc_files(os.path.abspath(args.source), args.files)
    blocks = [b for f in files for b in read_blocks(args.source, f)]
    if args.kind == "flags":
        return check_flags(args, files, blocks)
    return run_blocks(args, blocks)


if __name__ == "__main__":
    sys.exit(main())

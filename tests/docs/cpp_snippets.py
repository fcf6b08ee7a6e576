"""Compiles a document's C++ snippets against the installed package and runs them.

The build tree is installed into a scratch prefix; a CMake project is made of one source
file holding every snippet (its `#include` lines at file scope, the rest, with its hidden
setup and check, as the body of a function of its own) and the document's `cmake` block,
which links the executable `app` as a user's project would. `#line` directives make
compiler messages name the document and its line. Each snippet then runs in the working
directory; one that needs Redis runs only when the test Redis answers.
"""

import os
import shutil
import subprocess

from markdown_blocks import DocError
from shell_examples import _indent

TIMEOUT = 300


def _split(code, first_line, doc):
    """(include lines, body lines), each under #line directives of the document."""
    includes, body = [], []
    for offset, line in enumerate(code.rstrip("\n").split("\n")):
        target = includes if line.lstrip().startswith("#include") else body
        target.append(f'#line {first_line + offset} "{doc}"')
        target.append(line)
    return includes, body


def _function(ctx, block, name):
    """(include lines, function lines) of one snippet: its hidden setup, its code and its check
    as the body of `int name()`."""
    includes, body = [], []
    for first_line, code in ([(h.line, h.code) for h in block.setup] + [(block.first_code_line, block.code)]
                             + [(h.line, h.code) for h in block.check]):
        i, b = _split(ctx.code_for(block, code), first_line, block.doc)
        includes += i
        body += b
    return includes, [f"// {block.where()}", f"int {name}() {{", *body, "  return 0;", "}", ""]


def _translation_unit(ctx, snippets):
    """One source file for every snippet (the headers are parsed once) and a main that runs
    the one named by argv[1]."""
    includes, functions, names = ["#include <cstdio>", "#include <cstring>"], [], []
    for block, name in snippets:
        i, f = _function(ctx, block, name)
        includes += i
        functions += f
        names.append(name)
    main = ["int main(int argc, char** argv) {", "  if (argc != 2) return 2;"]
    main += [f'  if (std::strcmp(argv[1], "{n}") == 0) return {n}();' for n in names]
    main += ['  std::fprintf(stderr, "no snippet %s\\n", argv[1]);', "  return 2;", "}", ""]
    return "\n".join(["// extracted by tests/docs/doc_examples.py", *includes, *functions, *main])


def _project(blocks, sources):
    cmake = [b for b in blocks if b.kind == "cmake"]
    if len(cmake) != 1:
        raise DocError(f"the document needs exactly one `cmake` block linking `app` (found {len(cmake)})")
    return "\n".join(["cmake_minimum_required(VERSION 3.22)", "project(doc_snippets LANGUAGES CXX)",
                      "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
                      f"add_executable(app {' '.join(sources)})",
                      f"# {cmake[0].where()}:", cmake[0].code])


def _run(cmd, **kwargs):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          timeout=TIMEOUT, **kwargs)


def run(ctx, blocks):
    """(passed, failures, skipped) of the C++ snippets of `blocks`."""
    snippets = [b for b in blocks if b.kind == "cpp"]
    if not snippets:
        return 0, [], []
    project = ctx.work / "project"
    project.mkdir()
    skipped = [f"{b.where()} (cpp): skipped: {b.skip}" for b in snippets if b.skip]
    runnable = [(b, f"snippet_line_{b.line}") for b in snippets if not b.skip]
    (project / "snippets.cc").write_text(_translation_unit(ctx, runnable))
    (project / "CMakeLists.txt").write_text(_project(blocks, ["snippets.cc"]))

    prefix = ctx.work / "prefix"
    out = _run(["cmake", "--install", str(ctx.build), "--prefix", str(prefix)])
    if out.returncode != 0:
        return 0, [f"cmake --install {ctx.build} failed:\n{_indent(out.stdout)}"], skipped
    flags = f"-fsanitize={ctx.args.sanitize}" if ctx.args.sanitize else ""
    configure = ["cmake", "-S", str(project), "-B", str(project / "build"), f"-DCMAKE_PREFIX_PATH={prefix}",
                 f"-DCMAKE_CXX_COMPILER={ctx.args.cxx}", f"-DCMAKE_CXX_FLAGS={flags}",
                 f"-DCMAKE_EXE_LINKER_FLAGS={flags}"]
    if shutil.which("ccache"):
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    out = _run(configure)
    if out.returncode != 0:
        return 0, [f"configuring the snippets' project failed:\n{_indent(out.stdout)}"], skipped
    out = _run(["cmake", "--build", str(project / "build"), "--parallel", str(os.cpu_count() or 1)])
    if out.returncode != 0:
        return 0, [f"the C++ snippets of {snippets[0].doc} do not compile against the installed package:\n"
                   f"{_indent(out.stdout)}"], skipped

    passed, failures = 0, []
    app = project / "build" / "app"
    for block, name in runnable:
        why = ctx.why_not(block)
        if why:
            skipped.append(f"{block.where()} (cpp): compiled; not run: {why}")
            continue
        out = _run([str(app), name], cwd=ctx.work, env=ctx.env())
        if out.returncode != 0:
            failures.append(f"{block.where()}: the snippet exited {out.returncode}:\n{_indent(out.stdout)}")
            print(f"FAIL {block.where()} (cpp)", flush=True)
        else:
            passed += 1
            print(f"ok   {block.where()} (cpp)", flush=True)
    return passed, failures, skipped

#!/usr/bin/env python3
"""Runs the examples of a Markdown document as tests, read from the document itself
(docs/design.md, "Documented examples are tests"; markdown_blocks.py has the convention).

  doc_examples.py DOC --source DIR --build DIR --work DIR [--python PY] [--pythonpath DIR]
                      [--mlx-ref DIR] [--redis-env FILE] [--cpp --cxx CXX [--sanitize LIST]]

Shell and Python examples run in document order in a scratch working directory (--work)
holding `fixtures`, `build` and `python` links to the repository's and the build's, with
$HOME inside it (so `~` stays there) and the build's kvtool and prompt_cache_sim on PATH.
With --cpp, the C++ snippets are compiled against the installed package and run
(cpp_snippets.py). Ends with `N passed, N failed, N skipped`; exit 1 on any failure.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import markdown_blocks  # noqa: E402
import shell_examples  # noqa: E402

REDIS_URL = re.compile(r"redis://[^\s\"'`\\)]+")
BLOCK_TIMEOUT = 300


class Context:
    """What the examples run with, and what they need that may be absent."""

    def __init__(self, args):
        self.args = args
        self.source = pathlib.Path(args.source).resolve()
        self.build = pathlib.Path(args.build).resolve()
        self.work = pathlib.Path(args.work).resolve()
        self.redis_url, self.no_redis = self._find_redis()
        self._mlx_ref_why = None
        self._mlx_probed = False

    def prepare_work_dir(self):
        if self.work.exists():
            shutil.rmtree(self.work)
        (self.work / "home").mkdir(parents=True)
        os.symlink(self.source / "fixtures", self.work / "fixtures")
        os.symlink(self.build, self.work / "build")

    def env(self):
        env = dict(os.environ)
        bins = [self.build / "apps" / "kvtool", self.build / "apps" / "prompt_cache_sim"]
        env["PATH"] = os.pathsep.join([str(b) for b in bins] + [env.get("PATH", "/usr/bin:/bin")])
        env["HOME"] = str(self.work / "home")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        extra = []
        if self.args.pythonpath:
            extra.append(self.args.pythonpath)
        if self.mlx_ref_python().is_dir():
            extra.append(str(self.mlx_ref_python()))  # used by the blocks that need it, once it imports
        env["KVSTORE_DOCTEST_SYS_PATH"] = os.pathsep.join(extra)
        if self.redis_url:
            env["KVSTORE_DOCTEST_REDIS_URL"] = self.redis_url
        for name in ("KVSTORE_SHARED_SECRET",):
            env.pop(name, None)  # a developer's own secret must not change what examples do
        return env

    def _find_redis(self):
        values = {}
        path = self.args.redis_env or os.environ.get("KVSTORE_TEST_REDIS_ENV")
        if path and os.path.isfile(path):
            for line in open(path):
                key, _, value = line.strip().partition("=")
                values[key] = value
        url = values.get("KVSTORE_TEST_REDIS_URL") or os.environ.get("KVSTORE_TEST_REDIS_URL")
        if not url:
            return None, ("no test Redis (ctest starts one when redis-server is installed; or set "
                          "KVSTORE_TEST_REDIS_URL)")
        parts = urllib.parse.urlsplit(url)
        try:
            socket.create_connection((parts.hostname, parts.port), timeout=2).close()
        except OSError as e:
            return None, f"the test Redis at {parts.hostname}:{parts.port} does not answer ({e})"
        return url, None

    def mlx_ref_dir(self):
        return pathlib.Path(self.args.mlx_ref) if self.args.mlx_ref else self.source.parent / "shared" / "mlx-ref"

    def mlx_ref_python(self):
        return self.mlx_ref_dir() / "python"

    def mlx_ref_why(self):
        """None when ../shared/mlx-ref imports with the test interpreter, else why not."""
        if not self._mlx_probed:
            self._mlx_probed = True
            cache_py = self.mlx_ref_python() / "mlx_lm" / "models" / "cache.py"
            if not cache_py.is_file():
                self._mlx_ref_why = f"mlx-ref not found at {self.mlx_ref_dir()} (set KVSTORE_MLX_REF)"
            else:
                probe = subprocess.run([self.args.python, "-c", "import mlx.core, mlx_lm.models.cache"],
                                       env={**os.environ, "PYTHONPATH": str(self.mlx_ref_python())},
                                       capture_output=True, text=True)
                if probe.returncode != 0:
                    last = (probe.stderr.strip().split("\n") or ["?"])[-1]
                    self._mlx_ref_why = f"mlx-ref at {self.mlx_ref_dir()} does not import: {last}"
        return self._mlx_ref_why

    def why_not(self, block):
        """None when the block can run here, else why it is skipped."""
        if block.skip:
            return block.skip
        if "redis" in block.needs and not self.redis_url:
            return f"needs redis: {self.no_redis}"
        if block.kind == "python" and not self.args.pythonpath:
            return "the Python package is not built here (KVSTORE_PYTHON=OFF or a sanitizer build)"
        if "mlx-ref" in block.needs and self.mlx_ref_why():
            return f"needs mlx-ref: {self.mlx_ref_why()}"
        return None

    def code_for(self, block, code):
        """The code as it runs: the block's replacements, and the test Redis for redis:// URLs."""
        code = block.apply_replacements(code)
        urls = REDIS_URL.findall(code)
        if urls and "redis" not in block.needs:
            raise markdown_blocks.DocError(f"{block.where()}: the example uses {urls[0]}: mark it "
                                           "`<!-- doctest: needs redis -->` (its URLs then point at the test Redis)")
        return REDIS_URL.sub(lambda m: self.redis_url, code) if urls else code


def clear_redis_prefix(ctx, prefix="kvstore:"):
    """Removes the default key prefix's keys: the examples use it, one document at a time
    (ctest's RESOURCE_LOCK), and start from an empty tier."""
    parts = urllib.parse.urlsplit(ctx.redis_url)
    cli = ["redis-cli", "-h", parts.hostname, "-p", str(parts.port), "--no-auth-warning"]
    if parts.password:
        cli += ["--user", urllib.parse.unquote(parts.username or "default"), "--pass",
                urllib.parse.unquote(parts.password)]
    keys = subprocess.run(cli + ["--scan", "--pattern", prefix + "*"], capture_output=True, text=True).stdout.split()
    for i in range(0, len(keys), 100):
        subprocess.run(cli + ["unlink"] + keys[i:i + 100], capture_output=True)


class PythonSession:
    """The interpreter that runs a document's Python examples (python_examples.py)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.proc = None
        self.log = None

    def run(self, block):
        if self.proc is None:
            self.log = tempfile.TemporaryFile(mode="w+")
            runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_examples.py")
            self.proc = subprocess.Popen([self.ctx.args.python, runner], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.log, text=True,
                                         cwd=self.ctx.work, env=self.ctx.env())
        request = {
            "doc": block.doc,
            "code": self.ctx.code_for(block, block.code),
            "line": block.first_code_line,
            "setup": [["setup", self.ctx.code_for(block, h.code), h.line] for h in block.setup],
            "check": [["check", self.ctx.code_for(block, h.code), h.line] for h in block.check],
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            self.log.seek(0)
            self.proc = None
            return [f"{block.where()}: the interpreter died running this block; its stderr:\n"
                    + shell_examples._indent(self.log.read())]
        answer = json.loads(answer)
        return [e if e.startswith(block.doc + ":") else f"{block.where()}:\n{e}" for e in answer["errors"]]

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def run_document(ctx, doc_path, blocks):
    """(passed, failures, skipped) of the document's shell and Python examples."""
    passed, failures, skipped = 0, [], []
    python = PythonSession(ctx)
    redis_cleared = False
    try:
        for block in blocks:
            if block.kind not in ("shell", "python"):
                continue
            why = ctx.why_not(block)
            if why:
                skipped.append(f"{block.where()} ({block.kind}): skipped: {why}")
                continue
            if "redis" in block.needs and not redis_cleared:
                clear_redis_prefix(ctx)
                redis_cleared = True
            started = time.monotonic()
            try:
                if block.kind == "shell":
                    problems = shell_examples.run(block, ctx.env(), ctx.work,
                                                  lambda code: ctx.code_for(block, code), BLOCK_TIMEOUT)
                else:
                    problems = python.run(block)
            except markdown_blocks.DocError as e:
                problems = [str(e)]
            took = time.monotonic() - started
            if problems:
                failures += problems
                print(f"FAIL {block.where()} ({block.kind}, {took:.1f} s)", flush=True)
            else:
                passed += 1
                print(f"ok   {block.where()} ({block.kind}, {took:.1f} s)", flush=True)
    finally:
        python.close()
    return passed, failures, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("doc", help="the document, relative to --source (e.g. docs/cli.md)")
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default="", help="where the built kvstore package is (empty: not built)")
    parser.add_argument("--mlx-ref", default=os.environ.get("KVSTORE_MLX_REF"))
    parser.add_argument("--redis-env")
    parser.add_argument("--cpp", action="store_true", help="the C++ snippets instead of shell and Python")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--sanitize", default="")
    args = parser.parse_args()

    ctx = Context(args)
    text = (ctx.source / args.doc).read_text()
    started = time.monotonic()
    try:
        blocks = markdown_blocks.parse(args.doc, text)
        ctx.prepare_work_dir()
        if args.cpp:
            import cpp_snippets
            passed, failures, skipped = cpp_snippets.run(ctx, blocks)
        else:
            passed, failures, skipped = run_document(ctx, args.doc, blocks)
    except markdown_blocks.DocError as e:
        print(f"doc_examples: {e}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1
    for line in skipped:
        print(line)
    for failure in failures:
        print("\n" + failure)
    total = passed + len(failures) + len(skipped)
    if total == 0:
        print(f"\ndoc_examples: {args.doc} has no {'C++' if args.cpp else 'shell or Python'} example: "
              "nothing was tested")
        failures.append("no examples")
    print(f"\n{args.doc}: {len(failures)} failures, took {time.monotonic() - started:.1f} s")
    print(f"{passed} passed, {len(failures)} failed, {len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

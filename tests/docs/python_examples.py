"""Runs the Python examples of one document in one interpreter, in order, sharing one
namespace, as a reader who pastes them into one session would.

Started by doc_examples.py with the interpreter and PYTHONPATH of the package under
test; reads one JSON request a line on stdin and answers one JSON line each on the
stdout it was started with (the examples' own output is captured).

A block with `>>>` lines is a doctest (its output is compared, `...` matches what
varies); any other block is executed. Tracebacks name the document and its line.
"""

import contextlib
import doctest
import io
import json
import os
import sys
import traceback


def _compile(code, doc, line):
    # Blank lines in front make the traceback's line numbers the document's.
    return compile("\n" * (line - 1) + code, doc, "exec")


def _doc_frames_only(exc, doc):
    tb = traceback.TracebackException.from_exception(exc)
    frames = [f for f in tb.stack if f.filename == doc or not f.filename.endswith("python_examples.py")]
    tb.stack = traceback.StackSummary.from_list(frames)
    return "".join(tb.format())


def _exec(code, doc, line, namespace):
    try:
        exec(_compile(code, doc, line), namespace)
    except BaseException as e:  # reported, not raised: the next blocks still run
        if isinstance(e, KeyboardInterrupt):
            raise
        return _doc_frames_only(e, doc)
    return None


def _doctest(code, doc, line, namespace):
    parser = doctest.DocTestParser()
    test = parser.get_doctest(code, namespace, f"{doc}:{line}", doc, line - 1)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
    runner.run(test, out=out.write, clear_globs=False)
    namespace.update(test.globs)
    return out.getvalue() or None


def _run(request, namespace):
    out = io.StringIO()
    errors = []
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        for name, code, line in request["setup"]:
            err = _exec(code, request["doc"], line, namespace)
            if err:
                errors.append(f"{request['doc']}:{line}: the hidden setup failed:\n{err}")
        if not errors:
            code, line = request["code"], request["line"]
            run = _doctest if ">>> " in code else _exec
            err = run(code, request["doc"], line, namespace)
            if err:
                errors.append(err)
        if not errors:
            for name, code, line in request["check"]:
                err = _exec(code, request["doc"], line, namespace)
                if err:
                    errors.append(f"{request['doc']}:{line}: the hidden check failed:\n{err}")
    return {"errors": errors, "output": out.getvalue()}


def main():
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # output written below Python (by C code) cannot garble the answers
    for extra in filter(None, os.environ.get("KVSTORE_DOCTEST_SYS_PATH", "").split(os.pathsep)):
        sys.path.insert(0, extra)
    namespace = {"__name__": "__doc_examples__"}
    for request in sys.stdin:
        answer = _run(json.loads(request), namespace)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()

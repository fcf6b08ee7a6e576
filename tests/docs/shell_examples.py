"""Runs a shell example: a console block (`$ command` lines, each followed by the output
the document shows) or a script block (every line a command, no output shown).

The whole block runs in one bash, in the document's working directory, so variables set
by a `setup` directive reach the commands. stdout and stderr are read together, as a
terminal shows them.
"""

import subprocess

from output_match import first_difference, matches

MARK = "@@doctest-mark@@"


def console_steps(block):
    """[(line offset, command, [expected output lines])] of a console block."""
    steps = []
    lines = block.lines
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if not steps:
                raise ValueError(f"{block.where(i)}: output before the first `$ ` command")
            steps[-1][2].append(lines[i])
            i += 1
            continue
        offset = i
        command = [lines[i][2:]]
        while command[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            command.append(lines[i])
        steps.append((offset, "\n".join(command), []))
        i += 1
    return steps


def _mark(name):
    return f'__doctest_status=$?; printf "\\n{MARK} {name} %d\\n" "$__doctest_status"\n'


def _script(block, steps, prepare):
    parts = ["exec 2>&1\n"]
    for hidden in block.setup:
        parts += ["set -e\n", prepare(hidden.code), "\nset +e\n", _mark("setup")]
    if steps is None:
        parts += ["(set -e -o pipefail\n", prepare(block.code), "\n)\n", _mark("0")]
    else:
        for n, (_, command, _) in enumerate(steps):
            parts += [prepare(command), "\n", _mark(str(n))]
    for hidden in block.check:
        parts += ["(set -e -o pipefail\n", prepare(hidden.code), "\n)\n", _mark("check")]
    return "".join(parts)


def _sections(output):
    """{name: (status, [lines])} from the marked output."""
    sections, current = {}, []
    for line in output.split("\n"):
        if line.startswith(MARK + " "):
            _, name, status = line.split(" ")
            if current and current[-1] == "":
                current.pop()  # the newline the mark adds
            sections[name] = (int(status), current)
            current = []
        else:
            current.append(line)
    sections["rest"] = (None, current)
    return sections


def run(block, env, cwd, prepare, timeout):
    """[failure message]: empty when the block did what the document says."""
    steps = console_steps(block) if any(line.startswith("$ ") for line in block.lines) else None
    script = _script(block, steps, prepare)
    try:
        proc = subprocess.run(["bash", "--noprofile", "--norc"], input=script, text=True, errors="replace",
                              stdout=subprocess.PIPE, env=env, cwd=cwd, timeout=timeout)
        output = proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return [f"{block.where()}: timed out after {timeout} s; output so far:\n{_indent(out)}"]
    sections = _sections(output)
    failures = []
    if block.setup and ("setup" not in sections or sections["setup"][0] != 0):
        return [f"{block.doc}:{block.setup[0].line}: the hidden setup failed; its output:\n"
                f"{_indent(_unmarked(output))}"]
    if steps is None:
        status, lines = sections.get("0", (None, sections["rest"][1]))
        if status != 0:
            failures.append(f"{block.where()}: the script exited {status}; its output:\n{_indent(lines)}")
    else:
        for n, (offset, command, expected) in enumerate(steps):
            if str(n) not in sections:
                failures.append(f"{block.where(offset)}: `{command}` never finished (the shell exited); "
                                f"output:\n{_indent(sections['rest'][1])}")
                break
            status, actual = sections[str(n)]
            if status != block.exit_code:
                failures.append(f"{block.where(offset)}: `{command}` exited {status}, the document expects "
                                f"{block.exit_code}; its output:\n{_indent(actual)}")
            elif not matches(expected, actual):
                failures.append(_mismatch(block, offset, command, expected, actual))
    for hidden in block.check:
        status, lines = sections.get("check", (None, sections["rest"][1]))
        if status != 0:
            failures.append(f"{block.doc}:{hidden.line}: the hidden check failed (exit {status}):\n{_indent(lines)}")
    return failures


def _unmarked(output):
    return [line for line in output.split("\n") if not line.startswith(MARK)]


def _indent(lines, prefix="    "):
    if isinstance(lines, str):
        lines = lines.split("\n")
    return "\n".join(prefix + line for line in lines) if lines else prefix + "(nothing)"


def _mismatch(block, offset, command, expected, actual):
    diff = first_difference(expected, actual)
    first_output = offset + len(command.split("\n"))
    text = [f"{block.where(offset)}: the output of `{command}` differs from the document"]
    if diff:
        i, j = diff
        exp_line = expected[i] if i < len(expected) else "(end of output)"
        act_line = actual[j] if j < len(actual) else "(end of output)"
        text.append(f"  first difference at {block.where(first_output + i)}:")
        text.append(f"    expected: {exp_line}")
        text.append(f"    actual:   {act_line}")
    text.append("  expected (the document; `...` matches what varies):")
    text.append(_indent(expected))
    text.append("  actual:")
    text.append(_indent(actual))
    return "\n".join(text)

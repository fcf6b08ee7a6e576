"""The examples of a Markdown document: its fenced code blocks and the doctest comments
before them (docs/design.md, "Documented examples are tests", defines the convention).

A block is an example by its info string: `sh`, `bash`, `shell` and `console` blocks, and
blocks without an info string that contain a `$ ` command line, are shell examples;
`python` blocks are Python examples; `cpp` blocks are C++ snippets and `cmake` blocks the
lines that link them. Any other block (a usage synopsis, a diff, JSON) is not an example.

Directives are HTML comments that GitHub does not show, placed right before the block
(blank lines and other directive comments may come between):

    <!-- doctest: skip: REASON -->           not run; REASON is printed
    <!-- doctest: needs redis -->            runs only with the test Redis (else skipped)
    <!-- doctest: needs mlx-ref -->          runs only with ../shared/mlx-ref (else skipped)
    <!-- doctest: exit N -->                 every command of the block exits N (default 0)
    <!-- doctest: replace OLD => NEW -->     OLD in the code is NEW when it runs
    <!-- doctest: setup                      hidden code run before the block,
    CODE                                     in the block's language
    -->
    <!-- doctest: check                      hidden code run after it (a failure fails it)
    CODE
    -->

One-line directives may share a comment, separated by `;`.
"""

import re
import textwrap
from dataclasses import dataclass, field

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
COMMENT_START = re.compile(r"^\s*<!--\s*doctest:(.*)$")
SHELL_INFOS = {"sh", "bash", "shell", "console"}
PYTHON_INFOS = {"python", "py", "python3", "pycon"}
CPP_INFOS = {"cpp", "c++", "cc", "cxx"}


class DocError(Exception):
    """A malformed example or directive: the document, not the code, is wrong."""


@dataclass
class Hidden:
    line: int  # 1-based line of the first code line
    code: str


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    info: str
    kind: str  # "shell", "python", "cpp", "cmake" or "" (not an example)
    lines: list  # the block's lines, indentation of the fence removed
    skip: str = None
    needs: list = field(default_factory=list)
    exit_code: int = 0
    replacements: list = field(default_factory=list)  # [(old, new)]
    setup: list = field(default_factory=list)  # [Hidden]
    check: list = field(default_factory=list)  # [Hidden]

    @property
    def first_code_line(self):
        return self.line + 1

    @property
    def code(self):
        return "\n".join(self.lines) + "\n"

    def where(self, offset=0):
        """`doc:line` of the block's code line `offset` (0-based), or of the fence."""
        return f"{self.doc}:{self.first_code_line + offset}"

    def apply_replacements(self, text):
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text


def _closes(line, marker):
    s = line.strip()
    return len(s) >= len(marker) and set(s) == {marker[0]}


def _kind(info, lines):
    info = info.lower()
    if info in SHELL_INFOS:
        return "shell"
    if info in PYTHON_INFOS:
        return "python"
    if info in CPP_INFOS:
        return "cpp"
    if info == "cmake":
        return "cmake"
    if info == "" and any(line.startswith("$ ") for line in lines):
        return "shell"
    return ""


def _parse_directive(text, line, pending):
    """Adds one comment's directives (its text after `doctest:`) to `pending`."""
    head, _, body = text.partition("\n")
    word = head.strip()
    if word in ("setup", "check"):
        pending[word].append(Hidden(line + 1, textwrap.dedent(body)))
        return
    if body.strip():
        raise DocError(f"line {line}: only `setup` and `check` directives take lines of code")
    parts = [p.strip() for p in word.split(";")]
    for n, part in enumerate(parts):
        if not part:
            continue
        if part.startswith("skip"):
            reason = "; ".join([part[4:].lstrip(" :")] + parts[n + 1:]).strip()  # the rest is the reason
            if not reason:
                raise DocError(f"line {line}: `skip` needs a reason (`skip: why`)")
            pending["skip"] = reason
            break
        elif part.startswith("needs "):
            for need in part[6:].split(","):
                need = need.strip()
                if need not in ("redis", "mlx-ref"):
                    raise DocError(f"line {line}: unknown need {need!r} (redis, mlx-ref)")
                pending["needs"].append(need)
        elif part.startswith("exit "):
            try:
                pending["exit"] = int(part[5:])
            except ValueError:
                raise DocError(f"line {line}: `exit` needs a number, got {part[5:]!r}") from None
        elif part.startswith("replace "):
            old, arrow, new = part[8:].partition(" => ")
            if not arrow or not old:
                raise DocError(f"line {line}: `replace` needs `OLD => NEW`, got {part!r}")
            pending["replace"].append((old, new))
        else:
            raise DocError(f"line {line}: unknown doctest directive {part!r}")


def _fresh_pending():
    return {"skip": None, "needs": [], "exit": 0, "replace": [], "setup": [], "check": [], "line": None}


def parse(doc_name, text):
    """[Block] of every fenced block of `text`, with its directives. DocError for a
    directive that is malformed or not followed by a block."""
    lines = text.split("\n")
    blocks = []
    pending = _fresh_pending()
    i = 0
    while i < len(lines):
        line = lines[i]
        start = COMMENT_START.match(line)
        if start:
            first = i + 1
            rest = start.group(1)
            chunk = [rest]
            while "-->" not in chunk[-1]:
                i += 1
                if i >= len(lines):
                    raise DocError(f"{doc_name}:{first}: doctest comment is never closed")
                chunk.append(lines[i])
            chunk[-1] = chunk[-1][: chunk[-1].index("-->")]
            body = "\n".join(chunk)
            try:
                _parse_directive(body, first, pending)
            except DocError as e:
                raise DocError(f"{doc_name}:{e}") from None
            pending["line"] = pending["line"] or first
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            indent, marker, info = fence.groups()
            body = []
            j = i + 1
            while j < len(lines) and not _closes(lines[j], marker):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
                j += 1
            if j >= len(lines):
                raise DocError(f"{doc_name}:{i + 1}: code block is never closed")
            block = Block(doc_name, i + 1, info, _kind(info, body), body, pending["skip"], pending["needs"],
                          pending["exit"], pending["replace"], pending["setup"], pending["check"])
            if pending["line"] and not block.kind:
                raise DocError(f"{doc_name}:{pending['line']}: doctest comment before a block that is not an "
                               f"example (info string {info!r})")
            blocks.append(block)
            pending = _fresh_pending()
            i = j + 1
            continue
        if line.strip() and pending["line"]:
            raise DocError(f"{doc_name}:{pending['line']}: doctest comment not followed by a code block")
        i += 1
    if pending["line"]:
        raise DocError(f"{doc_name}:{pending['line']}: doctest comment not followed by a code block")
    return blocks

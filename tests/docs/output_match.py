"""Compares a command's output with the output a document shows.

Lines are compared after trailing whitespace is dropped; trailing empty lines do not count.
Where the document elides, `...` stands for what varies:
  * a line that is only `...` matches any number of lines (none included);
  * `...` inside a line matches any text within that line (a size, a pid, a hash).
"""

import re
from functools import lru_cache

ELLIPSIS = "..."


def _normalise(lines):
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_pattern(expected):
    if ELLIPSIS not in expected:
        return None
    return re.compile(".*".join(re.escape(part) for part in expected.split(ELLIPSIS)) + r"\Z", re.S)


def _line_matches(expected, actual):
    pattern = _line_pattern(expected)
    return expected == actual if pattern is None else pattern.match(actual) is not None


def matches(expected_lines, actual_lines):
    """True when the actual lines match the expected ones (with `...` as above)."""
    exp, act = _normalise(expected_lines), _normalise(actual_lines)

    @lru_cache(maxsize=None)
    def match(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == ELLIPSIS:
            return any(match(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and _line_matches(exp[i], act[j]) and match(i + 1, j + 1)

    return match(0, 0)


def first_difference(expected_lines, actual_lines):
    """(expected index, actual index) of the first line that does not match, for a report:
    the furthest point a greedy walk gets to."""
    exp, act = _normalise(expected_lines), _normalise(actual_lines)
    i = j = 0
    while i < len(exp):
        if exp[i] == ELLIPSIS:
            if i + 1 == len(exp):
                return None
            nxt = next((k for k in range(j, len(act)) if _line_matches(exp[i + 1], act[k])), None)
            if nxt is None:  # compare with the line as far from the end as the document's
                return i + 1, min(max(j, len(act) - (len(exp) - i - 1)), len(act))
            i, j = i + 1, nxt
            continue
        if j >= len(act) or not _line_matches(exp[i], act[j]):
            return i, j
        i, j = i + 1, j + 1
    return (i, j) if j < len(act) else None

"""help(kvstore) documents every public name, with readable signatures.

Public: the modules kvstore, kvstore.mlx_lm, kvstore.metrics and kvstore.errors, what
their __all__ exports (classes re-exported from the private _kvstore included), and
the public methods, properties and protocol methods of those classes.
"""

import importlib
import inspect
import pydoc
import re

import pytest

MODULES = ["kvstore", "kvstore.mlx_lm", "kvstore.metrics", "kvstore.errors"]

# Dunder methods a user calls (through len(), f[i], with ...), so documented too.
DOCUMENTED_DUNDERS = {
    "__init__", "__getitem__", "__len__", "__iter__", "__contains__", "__call__",
    "__enter__", "__exit__", "__dlpack__", "__dlpack_device__",
}

# The first line pybind11 puts in every docstring: name(arguments) -> result.
_SIGNATURE_LINE = re.compile(r"^\w+\(.*\)( -> .*)?$")


def _text(doc):
    """`doc` without pybind11's signature lines: what a reader learns beyond the signature."""
    lines = [line for line in (doc or "").splitlines() if not _SIGNATURE_LINE.match(line.strip())]
    return "\n".join(lines).strip()


def _public_objects():
    """(qualified name, object) of every public callable and class of the public modules."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        yield module_name, module
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.ismodule(value) or not callable(value):
                continue  # kvstore.errors is walked itself; constants have no docstring
            yield f"{module_name}.{name}", value
            if inspect.isclass(value):
                for member_name, member in vars(value).items():
                    if member_name.startswith("_") and member_name not in DOCUMENTED_DUNDERS:
                        continue
                    if not (callable(member) or isinstance(member, (property, staticmethod, classmethod))):
                        continue  # class constants (exit_code, code)
                    yield f"{module_name}.{name}.{member_name}", member


@pytest.mark.parametrize("name,obj", list(_public_objects()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_public_name_has_a_docstring(name, obj):
    doc = obj.__func__.__doc__ if isinstance(obj, (staticmethod, classmethod)) else obj.__doc__
    assert _text(doc), f"{name} has no docstring beyond its signature: {doc!r}"


@pytest.mark.parametrize("module_name", MODULES)
def test_help_shows_no_pybind11_internals(module_name):
    text = pydoc.render_doc(importlib.import_module(module_name), renderer=pydoc.plaintext)
    # Every pybind11 class derives from pybind11_object, and help() lists a class's bases
    # (the name is pybind11's, shared by every extension in the process): the one mention
    # allowed. Signatures and docstrings name no C++ or pybind11 type.
    text = re.sub(r"pybind11_builtins\.pybind11_(object|type)\b|\bpybind11_object\b", "BASE", text)
    for internal in ("detail::", "pybind11"):
        lines = [line.strip() for line in text.splitlines() if internal in line]
        assert not lines, f"help({module_name}) shows {internal!r}: {lines[:5]}"


@pytest.mark.parametrize("module_name", MODULES + ["kvstore._kvstore"])
def test_signatures_are_readable(module_name):
    # pybind11 names unnamed arguments arg0, arg1, ...: every argument has a name.
    text = pydoc.render_doc(importlib.import_module(module_name), renderer=pydoc.plaintext)
    assert not re.search(r"\barg\d+\b", text), re.findall(r".*\barg\d+\b.*", text)[:5]
    # pybind11's own types (handle, accessor) are no Python types a reader knows.
    assert not re.search(r": handle\b|-> handle\b", text), re.findall(r".*\bhandle\b.*", text)[:5]

#!/usr/bin/env python3
"""The layering rule of docs/design.md, checked.

The layer table at the top of docs/design.md is the single source: its rows,
top to bottom, are the layers from lowest to highest, each naming its public
headers (include/kvstore/) and its folder of libkvstore/. This test fails
when:
  * a file of libkvstore/ or include/kvstore/ includes a header of a higher
    layer;
  * a file of libkvstore/<folder>/ includes a header of a folder that its
    CMake target (kvstore_layer(<folder> DEPENDS ...) in
    libkvstore/<folder>/CMakeLists.txt) does not depend on, directly or
    through the folders it depends on;
  * a folder's DEPENDS names a folder that is not below it;
  * a folder or public header is missing from the table;
  * a folder of libkvstore/ holds more than 28 source files;
  * code outside the folders that parse or define cache classes (cache/,
    format/, engines/) names a cache class in a string literal: it asks the
    cache, or the class's CacheClassInfo, instead (docs/design.md, Class
    knowledge).

Usage: layering_test.py SOURCE_DIR
"""
import os
import re
import sys

MAX_SOURCE_FILES = 28
SOURCE_SUFFIXES = (".cc", ".h")
CLASS_FOLDERS = ("cache", "format", "engines")
CLASS_NAME_LITERAL = re.compile(
    r'"(KVCache|ConcatenateKVCache|RotatingKVCache|ChunkedKVCache|QuantizedKVCache|CacheList|'
    r'BatchKVCache|BatchRotatingKVCache|ArraysCache|MambaCache)"')


def class_name_literals(root):
    """(path, line number) of each cache class name in a string literal outside CLASS_FOLDERS."""
    found = []
    dirs = [os.path.join(root, "libkvstore", d) for d in os.listdir(os.path.join(root, "libkvstore"))
            if d not in CLASS_FOLDERS]
    dirs += [os.path.join(root, "apps"), os.path.join(root, "python", "src")]
    for top in dirs:
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if CLASS_NAME_LITERAL.search(line):
                            found.append((os.path.relpath(path, root), n))
    return found


def layer_table(root):
    """[(folder, [public headers])] in layer order, lowest first."""
    rows = []
    with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\| (\w+) \| (.*?) \| `libkvstore/(\w+)/` \|", line)
            if m:
                rows.append((m.group(3), re.findall(r"`([\w.]+\.h)`", m.group(2))))
            elif rows and not line.startswith("|"):
                break  # the first table only
    return rows


def depends(root, folder):
    path = os.path.join(root, "libkvstore", folder, "CMakeLists.txt")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"kvstore_layer\(\s*(\w+)((?:\s+DEPENDS(?:\s+\w+)*?)?)\s+SOURCES", text)
    if not m or m.group(1) != folder:
        return None
    return m.group(2).split()[1:]


def includes(path):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'\s*#\s*include\s+"(libkvstore/(\w+)/[^"]+|kvstore/([^"]+))"', line)
            if m:
                yield n, m.group(1), m.group(2), m.group(3)


def main():
    root = sys.argv[1]
    errors = []
    rows = layer_table(root)
    rank = {folder: i for i, (folder, _) in enumerate(rows)}
    public = {h: folder for folder, headers in rows for h in headers}
    if not rows:
        errors.append("docs/design.md: no layer table found")

    lib = os.path.join(root, "libkvstore")
    folders = sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d)))
    for d in folders:
        if d not in rank:
            errors.append(f"libkvstore/{d}/: not in the layer table of docs/design.md")
    for h in sorted(os.listdir(os.path.join(root, "include", "kvstore"))):
        if h.endswith(".h") and h not in public:
            errors.append(f"include/kvstore/{h}: not in the layer table of docs/design.md")

    # Each folder's DEPENDS go down; reachable = the folder and its closure.
    direct = {}
    for d in folders:
        if d not in rank:
            continue
        deps = depends(root, d)
        if deps is None:
            errors.append(f"libkvstore/{d}/CMakeLists.txt: no kvstore_layer({d} [DEPENDS ...] SOURCES ...)")
            deps = []
        for dep in deps:
            if dep not in rank or rank[dep] >= rank[d]:
                errors.append(f"libkvstore/{d}/CMakeLists.txt: DEPENDS {dep}, which is not below {d}")
        direct[d] = deps
    reachable = {}
    for d in direct:
        seen, todo = {d}, [d]
        while todo:
            for dep in direct.get(todo.pop(), []):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        reachable[d] = seen

    def check(path, own, allowed):
        rel = os.path.relpath(path, root)
        for n, target, folder, header in includes(path):
            layer = folder if folder else public.get(header)
            if layer is None:
                continue  # reported above as missing from the table
            if layer not in rank:
                errors.append(f"{rel}:{n}: includes {target}, of a folder not in the layer table")
            elif rank[layer] > rank[own]:
                errors.append(f"{rel}:{n}: includes {target}: layer {layer} is above {own} "
                              "(docs/design.md, layer table)")
            elif allowed is not None and layer not in allowed:
                errors.append(f"{rel}:{n}: includes {target}, but kvstore_{own} does not depend "
                              f"on kvstore_{layer} (libkvstore/{own}/CMakeLists.txt)")

    for d in folders:
        if d not in rank:
            continue
        files = sorted(f for f in os.listdir(os.path.join(lib, d)) if f.endswith(SOURCE_SUFFIXES))
        if len(files) > MAX_SOURCE_FILES:
            errors.append(f"libkvstore/{d}/: {len(files)} source files, more than {MAX_SOURCE_FILES}")
        for f in files:
            check(os.path.join(lib, d, f), d, reachable.get(d))
    for h, folder in sorted(public.items()):
        path = os.path.join(root, "include", "kvstore", h)
        if os.path.exists(path):
            check(path, folder, None)

    for rel, n in class_name_literals(root):
        errors.append(f"{rel}:{n}: names a cache class; ask the cache or its CacheClassInfo "
                      "(docs/design.md, Class knowledge)")

    for e in errors:
        print(e)
    print(f"layering: {len(rows)} layers, {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

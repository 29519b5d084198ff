#!/usr/bin/env python3
"""Finds include loops in kuiper/, counting a header and its source file as one unit.

foo.h, foo.cuh, foo.cpp and foo.cu in one folder are the unit "folder/foo"; unit A depends on
unit B when any file of A includes a file of B ("kuiper/..." includes only). A loop is a
strongly connected set of two or more units: each can reach the others, so none can be read,
built or replaced on its own. Prints every loop as a chain and exits 1 if there is one.

    python3 scripts/check_include_loops.py [--root .]
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"(kuiper/[^"]+)"', re.M)
EXTENSIONS = (".h", ".cuh", ".cpp", ".cu")


def unit_of(path):
    return os.path.splitext(path)[0]


def dependency_graph(root):
    graph = {}
    for folder, _, files in os.walk(os.path.join(root, "kuiper")):
        for name in files:
            if not name.endswith(EXTENSIONS):
                continue
            path = os.path.relpath(os.path.join(folder, name), root)
            with open(os.path.join(root, path), encoding="utf-8") as f:
                included = INCLUDE.findall(f.read())
            unit = unit_of(path)
            deps = graph.setdefault(unit, set())
            deps.update(unit_of(i) for i in included if unit_of(i) != unit)
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the components of two or more units."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def chain(graph, component):
    """One cycle through the component's first unit, as 'a -> b -> a'."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    node = start
    while True:
        nxt = sorted(d for d in graph[node] if d in members)
        back = start in nxt
        unseen = [d for d in nxt if d not in seen]
        if back and (len(path) > 1 or not unseen):
            return " -> ".join(path + [start])
        if not unseen:
            return " <-> ".join(component)
        node = unseen[0]
        seen.add(node)
        path.append(node)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    graph = dependency_graph(args.root)
    loops = strongly_connected(graph)
    for component in loops:
        print("include loop: " + chain(graph, component))
    print(f"{len(graph)} units in kuiper/, {len(loops)} include loop(s)")
    return 1 if loops else 0


if __name__ == "__main__":
    sys.exit(main())

"""No import circle inside observed_engine or the dashboard (issue 27): two modules that import
each other are one concept split wrong, or a shared piece that wants a module of its own.

Built from the static import graph (grimp, which lint-imports uses), without the imports under
``TYPE_CHECKING`` (the package root names its lazy exports there for type checkers only)."""

from __future__ import annotations

import grimp


def strongly_connected(graph) -> list:
    """The import circles of ``graph``: its strongly connected components of more than one
    module, each sorted (Tarjan's algorithm, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    found: list = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = edges[node]
            for i in range(position, len(successors)):
                successor = successors[i]
                if successor not in index:
                    work.append((node, i + 1))
                    work.append((successor, 0))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return sorted(found)


def test_strongly_connected_finds_a_circle_and_nothing_else():
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.d")
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_import_circle_in_the_package_or_the_dashboard():
    graph = grimp.build_graph("observed_engine", "dashboard", exclude_type_checking_imports=True,
                              cache_dir=None)
    circles = strongly_connected(graph)
    assert circles == [], "import circles (move what both sides use into a module of its own):\n" + "\n".join(
        " <-> ".join(c) for c in circles)

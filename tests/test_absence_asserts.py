"""Every test that asserts an absence also asserts that what it read is what it meant to read.

`assert SECRET not in page` passes on a login page, a 500, an empty list of hits or a search that is broken,
so an absence alone proves nothing (issue 52, item 5). The rule, checked on the syntax tree of every test:

- An *absence* is an `assert` holding an `x not in y` comparison, in the test function itself or in a
  function of the same module that the test calls (a helper such as `assert_hidden(page)`).
- Its *source* is the set of roots of `y`: the name an attribute, subscript or method chain starts from
  (`client` in `client.get(url).content.decode()`), or the plain function called (`seen` in `seen(user)`;
  the argument's roots for a mere conversion such as `set(...)`, `"".join(...)` or `json.loads(...)`), followed through
  the test's own assignments (`body = client.get(url)...` gives `body` the roots of `client`),
  comprehensions included.
- The absence is *anchored* when the test function itself (or one of ANCHOR_HELPERS it calls) also asserts,
  on a value sharing one of those roots, a presence: an `x in y` comparison (`y`'s roots; `x`'s where `y` is a
  literal tuple, list or set), an equality with something that is not empty, a `.startswith`/`.endswith`,
  a `status_code`, or a `pytest.raises(..., match=...)` on what it catches.

`test_the_checker_flags_an_unanchored_absence` is the positive control: it feeds the checker sources that
break the rule and sources that keep it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Helpers that assert a page is the one meant (status and a marker) and may stand for the test's own presence assert.
ANCHOR_HELPERS = frozenset({
    "admin_page",  # tests/security/pages.py: status 200, a signed-in admin page, a marker of it
    "listed",  # tests/chat/test_review_scope.py: status 200, and the answer's own row on the review desk
})

CONVERSIONS = frozenset({"set", "frozenset", "list", "tuple", "sorted", "dict", "str", "repr", "len", "next", "iter", "reversed"})

PREFIXES = frozenset({"startswith", "endswith"})  # `assert text.startswith(...)` is a presence too

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _assignments(function: Function) -> dict[str, list[ast.expr]]:
    """Every value a local name is bound to in the function (assignments, loop and `with` targets, comprehensions)."""
    bound: dict[str, list[ast.expr]] = {}

    def bind(target: ast.expr, value: ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                bound.setdefault(node.id, []).append(value)

    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, node.value)
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr | ast.AugAssign) and node.value is not None:
            bind(node.target, node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            bind(node.target, node.iter)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    bind(item.optional_vars, item.context_expr)
    return bound


class _Scope:
    """What roots are read through in one function: its assignments, and its parameters (the fixtures)."""

    def __init__(self, function: Function) -> None:
        self.bound = _assignments(function)
        self.params = {argument.arg for argument in [*function.args.args, *function.args.kwonlyargs]}

    def roots(self, expr: ast.AST, followed: set[str] | None = None) -> set[str]:
        """The names `expr` is read from (module docstring), following the function's own assignments."""
        followed = set() if followed is None else followed
        if isinstance(expr, ast.Name):
            if expr.id in followed:
                return set()
            followed.add(expr.id)
            roots = {expr.id}
            for value in self.bound.get(expr.id, []):
                roots |= self.roots(value, followed)
            return roots
        if isinstance(expr, ast.Attribute | ast.Subscript | ast.Starred):
            return self.roots(expr.value, followed)
        if isinstance(expr, ast.Call):
            converts = _converts(expr.func)
            if not converts and not isinstance(expr.func, ast.Name):  # a method: client.get(url) reads client
                return self.roots(expr.func, followed)
            arguments: set[str] = set()
            for argument in expr.args:
                arguments |= self.roots(argument, followed)
            if converts or not isinstance(expr.func, ast.Name):
                return arguments
            # A function: seen(user) reads seen, and read(sock) sock too, but not a fixture every test shares.
            return {expr.func.id} | (arguments - self.params)
        roots = set()
        for child in ast.iter_child_nodes(expr):
            roots |= self.roots(child, followed)
        return roots


def _converts(func: ast.expr) -> bool:
    """A call that only reshapes its arguments (`set(ids)`, `"".join(tokens)`, `json.loads(body)`,
    `re.sub(pattern, "", page)`): its roots are theirs."""
    if isinstance(func, ast.Name):
        return func.id in CONVERSIONS
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Constant):
        return func.attr == "join"  # "".join(tokens)
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in {"json", "re", "html"}


def _is_empty(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return not expr.value
    if isinstance(expr, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return not list(ast.iter_child_nodes(expr))
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in {"set", "list", "dict", "tuple"} and not expr.args


def _comparisons(test: ast.expr) -> Iterator[tuple[ast.expr, ast.cmpop, ast.expr]]:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                yield left, op, right
                left = right


def _asserts(function: Function) -> Iterator[ast.Assert]:
    return (node for node in ast.walk(function) if isinstance(node, ast.Assert))


def _calls(function: Function) -> Iterator[str]:
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node.func.id


def _absence_roots(function: Function, helpers: dict[str, Function], seen: frozenset[str] = frozenset()) -> set[str]:
    """The roots of every container the function (and the module's helpers it calls) asserts an absence in."""
    scope = _Scope(function)
    roots: set[str] = set()
    for statement in _asserts(function):
        for _, op, right in _comparisons(statement.test):
            if isinstance(op, ast.NotIn):
                roots |= scope.roots(right) or {"<literal>"}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers and node.func.id not in seen:
            helper = helpers[node.func.id]
            if _absence_roots(helper, helpers, seen | {node.func.id}):
                for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                    roots |= scope.roots(argument)
    return roots


def _presence_roots(function: Function) -> set[str]:
    """The roots of every value the function asserts a presence on: `in`, a non-empty equality, a status code."""
    scope = _Scope(function)
    roots: set[str] = set()
    for node in ast.walk(function):  # `with pytest.raises(Error, match="...") as refused` asserts on `refused`
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and any(k.arg == "match" for k in call.keywords) and item.optional_vars:
                    roots |= scope.roots(item.optional_vars)
    for statement in _asserts(function):
        for left, op, right in _comparisons(statement.test):
            if isinstance(op, ast.In):  # `x in page`, or `status in (DONE, REFUSED)` of a value read
                roots |= scope.roots(left if isinstance(right, ast.Tuple | ast.List | ast.Set) else right)
            elif isinstance(op, ast.Eq) and not (_is_empty(left) or _is_empty(right)):
                roots |= scope.roots(left) | scope.roots(right)
        for node in ast.walk(statement.test):
            if isinstance(node, ast.Attribute) and node.attr == "status_code":
                roots |= scope.roots(node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PREFIXES:
                roots |= scope.roots(node.func.value)
    return roots


def unanchored_absences(source: str, filename: str = "<test>") -> list[str]:
    """The test functions of `source` that assert an absence with no presence asserted on the same source."""
    tree = ast.parse(source, filename)
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    helpers = {function.name: function for function in functions if not function.name.startswith("test_")}
    flagged = []
    for function in functions:
        if not function.name.startswith("test_"):
            continue
        absent = _absence_roots(function, helpers)
        if not absent:
            continue
        if any(name in ANCHOR_HELPERS for name in _calls(function)):
            continue
        if not absent & _presence_roots(function):
            flagged.append(f"{filename}:{function.lineno} {function.name}")
    return flagged


def test_every_absence_is_anchored_by_a_presence_on_the_same_source() -> None:
    flagged = []
    for path in sorted(TESTS.rglob("test_*.py")):
        flagged += unanchored_absences(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert flagged == [], "assert a status or a marker of the page meant beside each absence:\n" + "\n".join(flagged)


UNANCHORED = '''
def test_login_page_passes(client):
    body = client.get("/admin/kb/document/", follow=True).content.decode()
    assert "secret" not in body
    assert Document.objects.count() == 1

def test_helper_absence(client):
    assert_hidden(client.get("/admin/").content.decode())

def assert_hidden(page):
    assert "secret" not in page

def test_ids(people):
    assert secret.pk not in seen(people["bob"])
    assert other.pk in hits(people["bob"])
'''

ANCHORED = '''
def test_status_and_marker(client):
    response = client.get("/admin/kb/document/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Public handbook" in body and "secret" not in body

def test_helper_absence(client):
    page = client.get("/admin/").content.decode()
    assert "Site administration" in page
    assert_hidden(page)

def assert_hidden(page):
    assert "secret" not in page

def test_ids(people):
    found = seen(people["bob"])
    assert public.pk in found and secret.pk not in found

def test_equal_ids(people):
    found = {hit.id for hit in seen(people["bob"])}
    assert found == {public.pk}
    assert secret.pk not in found
'''


def test_the_checker_flags_an_unanchored_absence() -> None:
    assert unanchored_absences(UNANCHORED) == [
        "<test>:2 test_login_page_passes",
        "<test>:7 test_helper_absence",
        "<test>:13 test_ids",
    ]
    assert unanchored_absences(ANCHORED) == []

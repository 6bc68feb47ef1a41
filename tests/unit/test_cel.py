"""The CEL evaluator and the Kubernetes CEL libraries (k8s.io/apiserver ``pkg/cel/library`` behaviour)."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest

from vplane.kube import cel

VARS = ("object", "oldObject", "params", "variables", "authorizer")
OBJ: dict[str, Any] = {
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {"replicas": 3, "ports": [80, 443, 8080], "tags": ["b", "a"], "empty": None, "ratio": 0.5},
}


def run(expression: str, **activation: Any) -> Any:
    values = {"object": OBJ, **activation}
    return cel.compile(expression, VARS).evaluate(values)


def fails(expression: str, **activation: Any) -> cel.CELError:
    with pytest.raises(cel.CELError) as info:
        run(expression, **activation)
    return info.value


# --- core language and engine-provided extensions ----------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("object.spec.replicas <= 5", True),
        ("has(object.spec.replicas) && !has(object.spec.missing)", True),
        ("object.spec.ports.all(p, p > 0)", True),
        ("object.spec.ports.exists(p, p == 443)", True),
        ("object.spec.ports.exists_one(p, p > 1000)", True),
        ("object.spec.ports.map(p, p + 1)", [81, 444, 8081]),
        ("object.spec.ports.filter(p, p < 1000)", [80, 443]),
        ("size(object.spec.tags)", 2),
        ("'web' in object.metadata.labels.map(k, object.metadata.labels[k])", True),
        ("object.metadata.name.matches('^w.b$')", True),
        ("object.metadata.name.startsWith('we') && object.metadata.name.endsWith('eb')", True),
        ("object.spec.empty == null", True),
        ("object.spec.replicas > 1 ? 'many' : 'one'", "many"),
        ("int('42') + 1", 43),
        ("string(object.spec.replicas)", "3"),
        ("double(object.spec.replicas) * object.spec.ratio", 1.5),
        ("duration('1h') > duration('59m')", True),
        ("timestamp('2024-01-01T00:00:00Z') < timestamp('2024-06-01T00:00:00Z')", True),
        ("object.spec.replicas < 3.5", True),
        # strings extension (engine)
        ("'a,b,c'.split(',')", ["a", "b", "c"]),
        ("'MiXeD'.lowerAscii() + 'x'.upperAscii()", "mixedX"),
        ("'hello'.replace('l', 'L')", "heLLo"),
        ("'hello'.substring(1, 3)", "el"),
        ("'  x '.trim()", "x"),
        ("'hello'.indexOf('l') + 'hello'.lastIndexOf('l')", 5),
        ("['a', 'b'].join('-')", "a-b"),
        ("'%s has %d replicas'.format([object.metadata.name, object.spec.replicas])", "web has 3 replicas"),
        ("'hello'.charAt(1)", "e"),
        # optional types (engine)
        ("object.?spec.?replicas.orValue(1)", 3),
        ("object.?spec.?missing.orValue(1)", 1),
        ("object.?spec.?missing.hasValue()", False),
        ("optional.of(2).value()", 2),
        ("[?object.?spec.?missing, ?optional.of(1)]", [1]),
        ("{?'a': object.?spec.?replicas, ?'b': optional.none()}", {"a": 3}),
        ("object.metadata.labels[?'app'].orValue('none')", "web"),
    ],
)
def test_core_language(expression: str, expected: Any) -> None:
    assert run(expression) == expected


def test_values_come_back_as_json_shapes() -> None:
    assert run("object.spec") == OBJ["spec"]
    assert run("b'ab'") == b"ab"
    assert run("duration('90s')") == datetime.timedelta(seconds=90)
    assert run("type(1)") == "int"
    assert run("null") is None


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("object.spec.missing", "no such key: missing"),
        ("object.spec.replicas / 0", "division by zero"),
        ("object.spec.replicas % 0", "modulus by zero"),
        ("object.spec.replicas + 'x'", "no such overload"),
        ("object.spec.ports[7]", "index '7' out of range in list size '3'"),
        ("optional.none().value()", "optional.none() dereference"),
        ("9223372036854775807 + object.spec.replicas", "integer overflow"),
    ],
)
def test_runtime_errors_use_cel_go_wording(expression: str, message: str) -> None:
    err = fails(expression)
    assert err.phase == "runtime"
    assert err.message == message
    assert err.expression == expression


def test_compile_errors_look_like_cel_go_issues() -> None:
    with pytest.raises(cel.CELError) as info:
        cel.compile("object.spec.replicas >", VARS)
    err = info.value
    assert err.phase == "compile"
    assert err.message.startswith("ERROR: <input>:1:23: Syntax error:")
    assert err.message.endswith("\n | object.spec.replicas >\n | ......................^")
    with pytest.raises(cel.CELError) as info:
        cel.compile("params.x", ["object"])
    assert info.value.message.startswith("ERROR: <input>:1:7: undeclared reference to 'params.x'")


def test_output_type_in_cel_go_spelling() -> None:
    assert cel.compile("1 < 2", VARS).output_type == "bool"
    assert cel.compile("object.x", VARS).output_type == "dyn"
    assert cel.compile("[1, 2]", VARS).output_type == "list(int)"
    assert cel.compile("{'a': 1}", VARS).output_type == "map(string, int)"
    assert cel.compile("null", VARS).output_type == "null_type"


def test_compiled_programs_are_cached() -> None:
    assert cel.compile("object.spec.replicas > 1", VARS) is cel.compile(
        "object.spec.replicas > 1", list(VARS)
    )
    assert cel.compile("1 + 1", ["a"]) is not cel.compile("1 + 1", ["b"])


def test_activation_is_reusable_across_programs_and_variable_sets() -> None:
    act = cel.Activation({"object": OBJ, "variables": {"x": 2}})
    assert cel.compile("object.spec.replicas * variables.x", VARS).evaluate(act) == 6
    assert cel.compile("object.metadata.name", ["object"]).evaluate(act) == "web"


def test_missing_activation_variable_is_an_error() -> None:
    program = cel.compile("params.x", VARS)
    with pytest.raises(cel.CELError) as info:
        program.evaluate({"object": OBJ})
    assert info.value.message == "no such attribute(s): params"


def test_null_results_do_not_exhaust_none() -> None:
    # cel-expr-python hands out None without a reference; without the fix CPython 3.11 aborts.
    program = cel.compile("[object.spec.empty, null]", VARS)
    act = cel.Activation({"object": OBJ})
    for _ in range(5000):
        assert program.evaluate(act) == [None, None]
    if sys.version_info < (3, 12):
        assert sys.getrefcount(None) > 2**59  # made immortal, as 3.12 does


# --- optionals the engine cannot hand to Python ------------------------------------------------------


def test_optional_results_are_unsupported_not_crashes() -> None:
    with pytest.raises(cel.UnsupportedResult):
        run("object.?spec.?replicas")
    with pytest.raises(cel.UnsupportedResult):
        run("[optional.none()]")
    with pytest.raises(cel.UnsupportedResult):
        run("{'a': {'b': object.?spec}}")


@pytest.mark.parametrize(
    "expression",
    [
        "[object.?spec.?replicas].sum() > 0",
        "{'a': object.?spec}.getHost() == ''",
        "sets.contains([optional.of(1)], [1])",
        "[{'a': optional.none()}].indexOf(1) == 0",
        "(true ? object.?spec : optional.none()) == optional.none() && [1].sum() == 1 && [object.?x].size() == 1",
    ],
)
def test_optionals_that_could_reach_python_functions_are_refused(expression: str) -> None:
    with pytest.raises(cel.CELError) as info:
        cel.compile(expression, VARS)
    assert info.value.phase == "compile"
    assert "unwrap it with orValue() or value() first" in info.value.message


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[object.?spec.?replicas.orValue(1)].sum()", 3),
        ("[?object.?spec.?replicas].sum()", 3),
        ("(object.?spec.?ports).orValue([]).sum()", 8603),
        ("object.?spec.?ports.orValue([1]).max() + optional.of(1).value()", 8081),
        ("{?'a': object.?spec.?replicas}.size() + [1].sum()", 2),
        ("object.?spec.?replicas == optional.of(3) && [1].sum() == 1", True),
    ],
)
def test_unwrapped_optionals_are_allowed(expression: str, expected: Any) -> None:
    assert run(expression) == expected


def test_an_optional_reaching_no_python_function_compiles_and_only_its_result_is_refused() -> None:
    program = cel.compile("[object.?spec.?replicas]", VARS)
    with pytest.raises(cel.UnsupportedResult, match="holds an optional"):
        program.evaluate({"object": OBJ})


# --- lists -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[1, 2, 3].isSorted()", True),
        ("['b', 'a'].isSorted()", False),
        ("[].isSorted()", True),
        ("[1, 2, 3].sum()", 6),
        ("[1.5, 2.5].sum()", 4.0),
        ("[].sum()", 0),
        ("[3, 1, 2].min()", 1),
        ("['b', 'c', 'a'].max()", "c"),
        ("object.spec.ports.indexOf(443)", 1),
        ("[1, 2, 2].lastIndexOf(2)", 2),
        ("['a'].indexOf('z')", -1),
        ("[[1], [2]].indexOf([2])", 1),
        ("[1, 2].indexOf(2.0)", 1),
        ("[true].indexOf(1)", -1),
        ("[1, 1, 2].distinct()", [1, 2]),
        ("[[1, [2]], 3].flatten()", [1, [2], 3]),
        ("[[1, [2]], 3].flatten(2)", [1, 2, 3]),
        ("[1, 2, 3].reverse()", [3, 2, 1]),
        ("'abc'.reverse()", "cba"),
        ("[1, 2, 3, 4].slice(1, 3)", [2, 3]),
        ("[3, 1, 2].sort()", [1, 2, 3]),
        ("lists.range(3)", [0, 1, 2]),
    ],
)
def test_lists(expression: str, expected: Any) -> None:
    assert run(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[].min()", "min called on empty list"),
        ("[].max()", "max called on empty list"),
        ("[1, 'a'].sum()", "no such overload"),
        ("[1, 'a'].isSorted()", "no such overload"),
        ("[9223372036854775807, 1].sum()", "integer overflow"),
        ("[1, 2].slice(2, 1)", "cannot slice(2, 1), start index must be less than or equal to end index"),
        ("[1, 2].slice(0, 3)", "cannot slice(0, 3), list is length 2"),
        ("[1, 'a'].sort()", "list elements must have the same type"),
        ("[1].flatten(-1)", "level must be non-negative"),
        ("[duration('1s')].sum()", "sum() cannot return timestamps or durations in this evaluator"),
        (
            "[timestamp('2024-01-01T00:00:00Z')].max()",
            "max() cannot return timestamps or durations in this evaluator",
        ),
    ],
)
def test_list_errors(expression: str, message: str) -> None:
    assert fails(expression).message == message


# --- regex and sets --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'abc 123 def 456'.find('[0-9]+')", "123"),
        ("'abc'.find('[0-9]+')", ""),
        ("'abc 123 def 456'.findAll('[0-9]+')", ["123", "456"]),
        ("'a1b2c3'.findAll('[0-9]', 2)", ["1", "2"]),
        ("'a1b2c3'.findAll('[0-9]', 0)", []),
        ("'a1b2c3'.findAll('([a-z])([0-9])')", ["a1", "b2", "c3"]),
        ("sets.contains([1, 2, 3], [3, 1])", True),
        ("sets.contains([1], [1, 2])", False),
        ("sets.contains([1.0], [1])", True),
        ("sets.intersects(['a', 'b'], ['c', 'b'])", True),
        ("sets.intersects([], [1])", False),
        ("sets.equivalent([1, 2, 2], [2, 1])", True),
        ("sets.equivalent([1], [1, 3])", False),
    ],
)
def test_regex_and_sets(expression: str, expected: Any) -> None:
    assert run(expression) == expected


def test_illegal_regex() -> None:
    assert fails("'x'.find('[')").message.startswith("Illegal regex: ")


# --- quantity --------------------------------------------------------------------------------------

QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("quantity('1Gi').isGreaterThan(quantity('1000Mi'))", True),
        ("quantity('500m').isLessThan(quantity('1'))", True),
        ("quantity('1k').compareTo(quantity('1000'))", 0),
        ("quantity('1k') == quantity('1000')", True),
        ("quantity('2Gi').asInteger()", 2 * 1024**3),
        ("quantity('1500m').asApproximateFloat()", 1.5),
        ("quantity('1500m').isInteger()", False),
        ("quantity('3').isInteger()", True),
        ("quantity('1k').add(quantity('500')).asInteger()", 1500),
        ("quantity('1k').add(24).asInteger()", 1024),
        ("quantity('1k').sub(quantity('1.5k')).sign()", -1),
        ("quantity('1k').sub(1000).sign()", 0),
        ("sign(quantity('2m'))", 1),
        ("isQuantity('1.5Gi')", True),
        ("isQuantity('1Zi')", False),
        ("isQuantity('')", False),
        ("quantity('0.1n') == quantity('1n')", True),  # rounded up to nano precision
        ("quantity('1e3').asInteger()", 1000),
        ("quantity('-1.5').asApproximateFloat()", -1.5),
        ("quantity('+') == quantity('0')", True),
        ("quantity('12E').asApproximateFloat()", 1.2e19),
    ],
)
def test_quantity(expression: str, expected: Any) -> None:
    assert run(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("quantity('abc')", QUANTITY_FORMAT),
        ("quantity('1Zi')", QUANTITY_FORMAT),
        ("quantity('1e')", "unable to parse quantity's suffix"),
        ("quantity('1ki')", "unable to parse quantity's suffix"),
        ("quantity('.')", "unable to parse numeric part of quantity"),
        ("quantity('1.5').asInteger()", "cannot convert value to integer"),
        ("quantity('10E').asInteger()", "cannot convert value to integer"),
        ("quantity('1').compareTo(semver('1.0.0'))", "no such overload"),
    ],
)
def test_quantity_errors(expression: str, message: str) -> None:
    assert fails(expression).message == message


# --- url -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("url('https://user:pw@example.com:8443/a%20b/c?x=1&y=2&x=3#frag').getScheme()", "https"),
        ("url('https://user:pw@example.com:8443/a%20b/c?x=1&y=2&x=3#frag').getHost()", "example.com:8443"),
        ("url('https://example.com:8443/').getHostname()", "example.com"),
        ("url('https://example.com:8443/').getPort()", "8443"),
        ("url('https://example.com/').getPort()", ""),
        ("url('https://[::1]:80/').getHost()", "[::1]:80"),
        ("url('https://[::1]:80/').getHostname()", "::1"),
        ("url('https://example.com/a%20b/c').getEscapedPath()", "/a%20b/c"),
        ("url('https://example.com/a b').getEscapedPath()", "/a%20b"),
        (
            "url('https://example.com/p?x=1&y=a+b&x=3&z=%2B').getQuery()",
            {"x": ["1", "3"], "y": ["a b"], "z": ["+"]},
        ),
        ("url('https://example.com').getQuery()", {}),
        ("url('/absolute/path').getEscapedPath()", "/absolute/path"),
        ("isURL('https://example.com')", True),
        ("isURL('/path')", True),
        ("isURL('relative/path')", False),
        ("isURL('')", False),
        ("isURL('https://example.com:port/')", False),
        ("url('https://example.com') == url('https://example.com')", True),
    ],
)
def test_url(expression: str, expected: Any) -> None:
    assert run(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "url('relative')",
            'URL parse error during conversion from string: parse "relative": invalid URI for request',
        ),
        ("url(':x')", 'URL parse error during conversion from string: parse ":x": missing protocol scheme'),
        (
            "url('https://h:port/')",
            'URL parse error during conversion from string: parse "https://h:port/": invalid port ":port" after host',
        ),
        ("url('')", 'URL parse error during conversion from string: parse "": empty url'),
    ],
)
def test_url_errors(expression: str, message: str) -> None:
    assert fails(expression).message == message


# --- ip and cidr -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("ip('10.0.0.1').family()", 4),
        ("ip('2001:db8::1').family()", 6),
        ("isIP('1.2.3.4')", True),
        ("isIP('1.2.3')", False),
        ("isIP('fe80::1%eth0')", False),
        ("ip.isCanonical('2001:db8::1')", True),
        ("ip.isCanonical('2001:DB8::1')", False),
        ("ip('0.0.0.0').isUnspecified()", True),
        ("ip('127.0.0.2').isLoopback()", True),
        ("ip('::1').isLoopback()", True),
        ("ip('224.0.0.1').isLinkLocalMulticast()", True),
        ("ip('ff02::1').isLinkLocalMulticast()", True),
        ("ip('169.254.1.1').isLinkLocalUnicast()", True),
        ("ip('fe80::1').isLinkLocalUnicast()", True),
        ("ip('10.0.0.1').isGlobalUnicast()", True),
        ("ip('255.255.255.255').isGlobalUnicast()", False),
        ("string(ip('2001:0db8::0001'))", "2001:db8::1"),
        ("ip('10.0.0.1') == ip('10.0.0.1')", True),
        ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", True),
        ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", False),
        ("cidr('10.0.0.0/8').containsIP('::1')", False),
        ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", True),
        ("cidr('10.1.0.0/16').containsCIDR(cidr('10.0.0.0/8'))", False),
        ("cidr('10.1.2.3/8').prefixLength()", 8),
        ("string(cidr('10.1.2.3/8'))", "10.1.2.3/8"),
        ("string(cidr('10.1.2.3/8').masked())", "10.0.0.0/8"),
        ("cidr('10.1.2.3/8').ip() == ip('10.1.2.3')", True),
        ("isCIDR('10.0.0.0/33')", False),
        ("isCIDR('2001:db8::/32')", True),
    ],
)
def test_ip_and_cidr(expression: str, expected: Any) -> None:
    assert run(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "ip('nope')",
            'IP Address "nope" parse error during conversion from string: ParseAddr("nope"): unable to parse IP',
        ),
        ("ip('::ffff:1.2.3.4')", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed'),
        ("ip('fe80::1%eth0')", 'IP address "fe80::1%eth0" with zone value is not allowed'),
        (
            "cidr('10.0.0.0')",
            "network address parse error during conversion from string: network address parse error during "
            "conversion from string: netip.ParsePrefix(\"10.0.0.0\"): no '/'",
        ),
        (
            "cidr('10.0.0.0/99')",
            "network address parse error during conversion from string: network address parse error during "
            'conversion from string: netip.ParsePrefix("10.0.0.0/99"): bad bits after slash: "99"',
        ),
        ("cidr('10.0.0.0/8').containsIP('bad')", "no such overload"),
    ],
)
def test_ip_and_cidr_errors(expression: str, message: str) -> None:
    assert fails(expression).message == message


# --- semver ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("semver('1.2.3').major() + semver('1.2.3').minor() + semver('1.2.3').patch()", 6),
        ("semver('1.2.3').isLessThan(semver('1.10.0'))", True),
        ("semver('1.0.0-alpha').compareTo(semver('1.0.0'))", -1),
        ("semver('1.0.0-alpha.1').compareTo(semver('1.0.0-alpha.beta'))", -1),
        ("semver('1.0.0+build') == semver('1.0.0')", True),
        ("semver('v01.2', true).isGreaterThan(semver('1.1.9'))", True),
        ("isSemver('1.2')", False),
        ("isSemver('v1.2', true)", True),
    ],
)
def test_semver(expression: str, expected: Any) -> None:
    assert run(expression) == expected


def test_semver_errors() -> None:
    assert fails("semver('1.2')").message == "No Major.Minor.Patch elements found"
    assert fails("semver('01.2.3')").message == 'Major number must not contain leading zeroes "01"'
    assert (
        fails("semver('1.2-rc', true)").message == "short version cannot contain PreRelease/Build meta data"
    )


# --- authorizer ------------------------------------------------------------------------------------


def test_authorizer_checks_go_to_the_callback() -> None:
    seen: list[cel.AuthzCheck] = []

    def check(c: cel.AuthzCheck) -> cel.AuthzDecision:
        seen.append(c)
        if c.verb == "explode":
            raise RuntimeError("authorizer down")
        return cel.AuthzDecision(c.verb in ("get", "list"), reason="RBAC" if c.verb == "get" else "")

    authz = cel.Authorizer(check, cel.RequestResource("apps", "deployments", "scale", "prod", "web"))
    act = cel.Activation({"object": OBJ, "authorizer": authz})

    def ev(expression: str) -> Any:
        return cel.compile(expression, VARS).evaluate(act)

    assert ev(
        "authorizer.group('apps').resource('deployments').namespace('prod').name('web').check('get').allowed()"
    )
    assert seen[-1] == cel.AuthzCheck(
        verb="get", resource_request=True, group="apps", resource="deployments", namespace="prod", name="web"
    )
    assert ev("authorizer.group('').resource('pods').subresource('log').check('get').reason()") == "RBAC"
    assert seen[-1].subresource == "log"
    assert not ev("authorizer.path('/metrics').check('post').allowed()")
    assert seen[-1] == cel.AuthzCheck(verb="post", resource_request=False, path="/metrics")
    assert ev(
        "authorizer.serviceAccount('kube-system', 'builder').group('').resource('secrets').check('list').allowed()"
    )
    assert seen[-1].service_account == ("kube-system", "builder")
    assert ev("authorizer.requestResource.check('update').allowed()") is False
    assert seen[-1] == cel.AuthzCheck(
        verb="update",
        resource_request=True,
        group="apps",
        resource="deployments",
        subresource="scale",
        namespace="prod",
        name="web",
    )
    decision = "authorizer.group('').resource('pods').check('explode')"
    assert ev(f"{decision}.errored()") is True
    assert ev(f"{decision}.error()") == "authorizer down"
    assert ev(
        "authorizer.group('').resource('pods').fieldSelector('a=b').labelSelector('x').check('get').allowed()"
    )
    assert (seen[-1].field_selector, seen[-1].label_selector) == ("a=b", "x")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("authorizer.path(' ').check('get')", "path must not be empty"),
        ("authorizer.group('').resource('').check('get')", "resource must not be empty"),
        ("authorizer.serviceAccount('ns', 'Bad_Name')", "Invalid service account name"),
        ("authorizer.serviceAccount('Bad.NS', 'ok')", "Invalid service account namespace"),
    ],
)
def test_authorizer_errors(expression: str, message: str) -> None:
    authz = cel.Authorizer(lambda c: cel.AuthzDecision(True))
    assert fails(expression, authorizer=authz).message == message


# --- expression text helpers ------------------------------------------------------------------------


def test_variable_references() -> None:
    refs, whole = cel.variable_references("variables.a + variables.b * 'variables.c' + x.variables.d")
    assert refs == {"a": 9, "b": 23}
    assert not whole
    assert cel.variable_references("variables['a']") == ({}, True)


def test_substitute_field() -> None:
    text = "variables.a.orValue(1) + size('variables.a') + variables.ab"
    assert cel.substitute_field(text, "variables", "a", "object.?x") == (
        "(object.?x).orValue(1) + size('variables.a') + variables.ab"
    )


def test_compile_error_helper() -> None:
    err = cel.compile_error("variables.foo > 1", 9, "undefined field 'foo'")
    assert err.message == "ERROR: <input>:1:10: undefined field 'foo'\n | variables.foo > 1\n | .........^"


def test_parse_quantity_is_exact() -> None:
    assert cel.parse_quantity("1.5Gi") == 1610612736
    assert cel.parse_quantity("100m") * 10 == 1
    assert cel.parse_quantity("-0.0000000001") == cel.parse_quantity("-1n")

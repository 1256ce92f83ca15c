"""The Go template engine against Go's documented text/template behaviour and the
templates docker users write (expected outputs are what Go prints for the same data)."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec.cli.views.gofuncs import GoMap, format_float, go_printf
from ctrexec.cli.views.gotemplate import TemplateError, parse

DATA: dict[str, Any] = {
    "Id": "web",
    "State": {"Status": "running", "Running": True, "Pid": 42, "ExitCode": 0, "Err": None},
    "Config": {
        "Env": ["PATH=/bin", "A=1"],
        "Cmd": ["sleep", "30"],
        "Entrypoint": None,
        "Labels": GoMap({"tier": "web", "app.name": "shop"}, zero=""),
    },
    "NetworkSettings": {
        "IPAddress": "10.1.0.2",
        "Ports": GoMap({"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}], "81/tcp": None}),
    },
    "Count": 3,
    "Ratio": 0.5,
    "Empty": [],
}


def run(template: str, data: Any = DATA) -> str:
    return parse(template).execute(data)


@pytest.mark.parametrize(
    ("template", "out"),
    [
        ("{{.State.Pid}}", "42"),
        ("{{.Id}}-{{ .State.Status }}", "web-running"),
        ("{{.State.Running}}", "true"),
        ("{{range .Config.Env}}{{println .}}{{end}}", "PATH=/bin\nA=1\n"),
        ('{{index .Config.Labels "tier"}}', "web"),
        ('[{{index .Config.Labels "nope"}}]', "[]"),  # a map[string]string's zero value
        ("{{.Config.Labels.nope}}", "<no value>"),  # a missing map key, printed
        ("{{.Config.Labels}}", "map[app.name:shop tier:web]"),  # Go sorts map keys
        ("{{.Config.Cmd}}", "[sleep 30]"),
        ("{{.Config.Entrypoint}}", "<no value>"),  # a JSON null on its own
        ("{{.State}}", "{running true 42 0 <nil>}"),  # a struct: its values, nil inside
        ("{{json .State}}", '{"Status":"running","Running":true,"Pid":42,"ExitCode":0,"Err":null}'),
        ("{{json .Config.Labels}}", '{"app.name":"shop","tier":"web"}'),
        ("{{json .Config.Entrypoint}}", "null"),
        ('{{json "<a&b>"}}', '"<a&b>"'),  # docker's json escapes no HTML
        ("{{.NetworkSettings.IPAddress}}", "10.1.0.2"),
        (
            "{{range $p, $b := .NetworkSettings.Ports}}{{$p}}->{{if $b}}"
            "{{(index $b 0).HostPort}}{{else}}none{{end}} {{end}}",
            "80/tcp->8080 81/tcp->none ",
        ),
        ("{{range $i, $e := .Config.Env}}{{$i}}:{{$e}};{{end}}", "0:PATH=/bin;1:A=1;"),
        ("{{range .Empty}}x{{else}}empty{{end}}", "empty"),
        ("{{range 3}}{{.}}{{end}}", "012"),  # Go 1.22's range over an integer
        ('{{range .Config.Env}}{{if eq . "A=1"}}{{break}}{{end}}{{.}};{{end}}', "PATH=/bin;"),
        ('{{range .Config.Env}}{{if eq . "PATH=/bin"}}{{continue}}{{end}}{{.}}{{end}}', "A=1"),
        ("{{with .State}}{{.Status}}{{end}}", "running"),
        ("{{with .Empty}}x{{else}}none{{end}}", "none"),
        ("{{with .Empty}}x{{else with .Id}}{{.}}{{end}}", "web"),
        ("{{if .Empty}}a{{else if .Count}}b{{else}}c{{end}}", "b"),
        ("{{if and .Count .Empty}}y{{else}}n{{end}}", "n"),
        ("{{or .Empty .Id}}", "web"),  # or returns its first true argument
        ("{{and .Count .Id}}", "web"),  # and returns its last one when all are true
        ("{{not .Empty}}", "true"),
        ('{{if eq .State.Status "exited" "running"}}yes{{end}}', "yes"),  # eq with several
        ("{{if ne .Count 3}}x{{else}}three{{end}}", "three"),
        ('{{lt 1 2}} {{le 2 2}} {{gt "b" "a"}} {{ge 1 2}}', "true true true false"),
        ("{{len .Config.Env}} {{len .Id}} {{len .Config.Labels}}", "2 3 2"),
        ("{{index .Config.Env 1}}", "A=1"),
        ("{{slice .Id 1}}", "eb"),
        ('{{join .Config.Cmd ","}}', "sleep,30"),
        ('{{split "a:b" ":"}}', "[a b]"),
        ('{{upper "ab"}} {{lower "AB"}} {{title "hello world"}}', "AB ab Hello World"),
        ('{{printf "%s=%d" .Id .State.Pid}}', "web=42"),
        (
            '{{printf "%5d|%-5s|%05.1f|%q|%v|%t" 7 "ab" 3.14159 "x" .Config.Cmd true}}',
            '    7|ab   |003.1|"x"|[sleep 30]|true',
        ),
        ('{{print "a" 1 2 "b"}}', "a1 2b"),  # Sprint: spaces only between non-strings
        ('{{println "a" 1}}', "a 1\n"),
        ('{{.State.Pid | printf "pid %d"}}', "pid 42"),  # the pipe's value goes last
        ('{{"x" | printf "%s-%s" "y"}}', "y-x"),
        ("{{$x := .State.Pid}}{{$x}}{{$x = 7}}{{$x}}", "427"),
        ("{{range .Config.Env}}{{$.Id}}{{end}}", "webweb"),
        ("{{(index .Config.Cmd 0)}}", "sleep"),
        ("{{.Ratio}} {{1e6}} {{123456.0}} {{0.0001}}", "0.5 1e+06 123456 0.0001"),
        ("{{0x1F}} {{'a'}} {{-3}}", "31 97 -3"),
        ("{{`raw\\n`}}", "raw\\n"),
        ('{{"tab\\there"}}', "tab\there"),
        ("a  {{- .Id -}}  b", "awebb"),  # trim markers eat the spaces beside them
        ("a {{- /* gone */ -}} b", "ab"),
        ("x{{/* comment */}}y", "xy"),
        ('x{{/* it\'s a "comment" */}}y', "xy"),  # quotes in a comment mean nothing
        ("{{println .Config.Labels.nope}}", "<nil>\n"),  # a missing key is passed as nil
        ('{{printf "%s|%v" nil nil}}', "%!s(<nil>)|<nil>"),
        ("{{if true}}\n  {{- .Id}}\n{{- end}}", "web"),
        ('{{printf "%v" nil}}', "<nil>"),
        ("no actions at all", "no actions at all"),
        (
            "{{.}}",
            "{web {running true 42 0 <nil>} {[PATH=/bin A=1] [sleep 30] <nil> "
            "map[app.name:shop tier:web]} {10.1.0.2 map[80/tcp:[{0.0.0.0 8080}] 81/tcp:<nil>]} "
            "3 0.5 []}",
        ),
    ],
)
def test_go_behaviour(template: str, out: str) -> None:
    assert run(template) == out


def test_a_method_takes_arguments() -> None:
    row = {"Label": lambda key: {"tier": "web"}.get(key, ""), "ID": "x"}
    assert run('{{.Label "tier"}}|{{.Label "nope"}}', row) == "web|"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{", "template: :1: unclosed action"),
        ("{{.Id", "template: :1: unclosed action"),
        ("{{nosuch .Id}}", 'template: :1: function "nosuch" not defined'),
        ("{{end}}", "template: :1: unexpected {{end}}"),
        ("{{if .Id}}x", "template: :1: unexpected EOF"),
        ("a\n{{else}}", "template: :2: unexpected {{else}}"),
        ("{{$nope}}", "template: :1: undefined variable '$nope'"),
        ("{{break}}", "template: :1: {{break}} outside {{range}}"),
        ('{{define "x"}}{{end}}', "template: :1: {{define}} is not supported"),
        ("{{.Id | 3}}", "template: :1: non executable command in pipeline stage 2"),
        ("{{.Id | upper | .}}", "template: :1: non executable command in pipeline stage 3"),
        ("{{/* open", "template: :1: unclosed action"),
        ("{{|}}", "template: :1: missing value for command"),
    ],
)
def test_parse_errors_are_go_s(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as err:
        parse(template)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{.Nope}}", 'executing "" at <.Nope>: map has no entry for key "Nope"'),
        ("{{.State.Pid.X}}", "at <.State.Pid.X>: can't evaluate field X in type int"),
        ("{{.State.Err.X}}", "nil pointer evaluating interface {}.X"),
        ("{{index .Config.Env 5}}", "error calling index: index out of range: 5"),
        ("{{index .State.Err 0}}", "error calling index: index of untyped nil"),
        ("{{len .Count}}", "error calling len: len of type int"),
        ('{{eq .Count "3"}}', "error calling eq: incompatible types for comparison"),
        ("{{lt .Config.Cmd 1}}", "error calling lt: incompatible types for comparison"),
        ("{{len 1 2}}", "wrong number of args for len: want 1 got 2"),
        ("{{range .State}}{{end}}", "range can't iterate over {running true 42 0 <nil>}"),
        ("{{.Id 1}}", "Id is not a method but has arguments"),
        ('{{"a" 1}}', "can't give argument to non-function"),
        ("{{nil}}", "nil is not a command"),
    ],
)
def test_execution_errors_are_go_s(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=r"^template: :1: ") as err:
        run(template)
    assert message in str(err.value)


def test_a_missing_key_under_a_missing_key_is_no_value() -> None:
    assert run("{{.Config.Labels.a.b}}") == "<no value>"


def test_variables_end_with_their_block() -> None:
    with pytest.raises(TemplateError, match="undefined variable '\\$x'"):
        parse("{{if true}}{{$x := 1}}{{end}}{{$x}}")
    assert run("{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}") == "2"  # = assigns outer


def test_one_template_runs_on_many_data() -> None:
    t = parse("{{.A}}")
    assert [t.execute({"A": n}) for n in (1, 2)] == ["1", "2"]


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0"), (1.5, "1.5"), (100000.0, "100000"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
     (0.00001, "1e-05"), (-2.5e-7, "-2.5e-07"), (1e21, "1e+21"), (3.0, "3")],
)  # fmt: skip
def test_floats_print_as_go_s_v(value: float, text: str) -> None:
    assert format_float(value) == text


def test_printf_reports_bad_verbs_as_go_does() -> None:
    assert go_printf("%d", "x") == "%!d(string=x)"
    assert go_printf("%s %s", "a") == "a %!s(MISSING)"
    assert go_printf("%s", "a", 1) == "a%!(EXTRA int=1)"
    assert go_printf("100%%") == "100%"

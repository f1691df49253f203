"""Rich results: matplotlib figures as PNG, DataFrames as HTML, JSON and Markdown displays, and the
JavaScript ``display`` helper, as ``Result`` objects with ``data``, named formats and ``formats()``.

Image content is not checked beyond the PNG signature.
"""

from __future__ import annotations

import base64

from lizard import CodeSandbox

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_matplotlib_figure_is_a_png(sandbox: CodeSandbox) -> None:
    ex = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('t')\nplt.show()"
    )
    assert ex.error is None, ex.error
    [fig] = ex.results
    assert not fig.is_main_result
    assert fig.formats() == ["text", "png"]
    assert fig.chart is not None and fig.chart["type"] == "line" and fig.chart["title"] == "t"
    assert fig.chart["elements"][0]["points"] == [[1, 1], [2, 4], [3, 9]]
    assert fig.png is not None
    assert base64.b64decode(fig.png).startswith(PNG_SIGNATURE)
    assert fig["image/png"] == fig["png"] == fig.png
    assert "png" in fig and "image/png" in fig and "html" not in fig
    assert fig.data is not None and fig.data.startswith("<Figure")
    assert "iVBOR" not in repr(fig)  # no base64 in reprs


def test_dataframe_is_html(sandbox: CodeSandbox) -> None:
    ex = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    [df] = ex.results
    assert df.is_main_result
    assert df.html is not None and "<table" in df.html and "dataframe" in df.html
    assert df.text is not None and "a  b" in df.text
    assert df.data == df.text
    assert df.table == {"a": [1, 2], "b": ["x", "y"]}
    assert df.formats() == ["text", "html"]
    assert ex.main_result is df and ex.text == df.text
    assert ex.outputs.html == df.html


def test_json_markdown_and_display_order(sandbox: CodeSandbox) -> None:
    ex = sandbox.run_code(
        "from IPython.display import JSON, Markdown, display\n"
        "print('before')\ndisplay(JSON({'a': [1, 2]}))\ndisplay(Markdown('# hi'))\n'last'"
    )
    assert ex.stdout == "before\n"
    j, md, last = ex.results
    assert j.json == {"a": [1, 2]} and "json" in j.formats()
    assert j.metadata is not None
    assert md.markdown == "# hi"
    assert last.is_main_result and last.data == "'last'"
    assert ex.formats() == ["text", "json", "markdown"]


def test_javascript_display_helper(sandbox: CodeSandbox) -> None:
    ex = sandbox.run_code("display.html('<b>hi</b>'); ({a: 1})", language="javascript")
    html, value = ex.results
    assert html.html == "<b>hi</b>" and not html.is_main_result
    assert value.is_main_result and value.data == "{ a: 1 }"

# Run in a real Python kernel by `kernels.rs::the_runners_fast_paths_give_what_ipython_gives`:
# the runner skips IPython's static input transforms for a cell they cannot change, and formats a
# plain int, float, complex, bool or str with text/plain alone when no other formatter can show
# it. Both must give exactly what IPython's own code gives, for cells and values on both sides of
# the line, and once formatters have been given printers (by type, base type, id, name), a
# `%precision` and a formatter turned off; and the `;` that silences a cell's value is found as
# IPython finds it. Prints the cells and values that differ.
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.formatters import DisplayFormatter
ip = get_ipython()
m, ref = ip.input_transformer_manager, TransformerManager()
cells = [
    "1+1", "x = 1\n\ny = 2", "x = 1\n\ny = 2\n", "s = '''a\n   \nb'''", "  x = 1", "\nx = 1", "\t1",
    "%time 1", "!echo hi", "x?", "x = !ls", "y = %pwd", "%%bash\necho\n", ">>> 1 + 1", "In [1]: 1",
    "a = [1, 2]\n...", "/print 1", ",print a b", ";print a b", "x = (1\n/ 2)", "x = 1\r\ny = 2",
    "", " ", "def f():\n    return 1\n", "print('100%')", "x = 5  # why?", "s = 'é'\n", "\x0cx = 1",
    "x = 1\n   \ny = 2", "for i in range(3):\n    pass\n\n", "pwd", "ls", "a = 1; b = 2",
]
bad = [c for c in cells if m.transform_cell(c) != ref.transform_cell(c)]
from IPython.core.displayhook import DisplayHook
ends = cells[:25] + ["1;", "1 ;  # c", "x = 1; y = 2", "f(';')", "1 # ;", "1;\n", "a = [1,\n 2];"]
hook = ip.displayhook.semicolon_at_end_of_expression
bad += [c for c in ends if bool(hook(c)) != bool(DisplayHook.semicolon_at_end_of_expression(c))]
fmt = ip.display_formatter
values = [0, 1, -5, 2**100, 1.5, float("nan"), 1e300, True, False, "x", "multi\nline", "é", 3 + 4j]
def same():
    return [v for v in values if fmt.format(v) != DisplayFormatter.format(fmt, v)]
bad += same()
html = fmt.formatters["text/html"]
html.for_type(int, lambda x: "<b>%d</b>" % x)  # and bool, a subclass
bad += same()
assert "text/html" in fmt.format(True)[0], fmt.format(True)
html.pop(int)
html.singleton_printers[id(True)] = lambda x: "<i>yes</i>"
bad += same()
assert fmt.format(True)[0].get("text/html") == "<i>yes</i>"
del html.singleton_printers[id(True)]
fmt.formatters["text/latex"].for_type_by_name("builtins", "float", lambda x: "$%s$" % x)
bad += same()
assert "text/latex" in fmt.format(2.5)[0]
fmt.formatters["text/latex"].pop(float)
ip.run_line_magic("precision", "2")
bad += same()
assert fmt.format(2.5)[0] == {"text/plain": "2.50"}, fmt.format(2.5)
fmt.active_types = [t for t in fmt.active_types if t != "text/html"]
bad += same()
print("mismatches:", bad)

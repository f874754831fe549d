"""Whole graphs' groups (explorer.present.graph_groups) and the whole view (?whole=1): a tensor graph by the model line tinygrad's
metadata names, a kernel's graphs by the loops tinygrad says each UOp is inside, every node kept."""
from __future__ import annotations
from explorer.present import graph_groups

def uop(i: int, op: str, num: int | None = None) -> dict:
  return {"id": str(i), "op": op, "label": op, **({"num": num} if num is not None else {})}

def site(fn: str, line: int | None, backward: bool = False) -> dict:
  return {"fn": fn, "file": "model.py" if line else None, "line": line, "backward": backward}

def test_a_tensor_graph_is_grouped_by_the_line_that_made_each_uop():
  """Each UOp with metadata goes to its line's group (forward and backward apart, two functions of one line together); a buffer
  only that line reads, and the store of its result, join it; what lies between lines is grouped by op; a group of one UOp is none."""
  nodes = [uop(0, "BUFFER"), uop(1, "BUFFER"), uop(2, "MUL", 20), uop(3, "ADD", 30), uop(4, "STORE"), uop(5, "SUM", 50),
           uop(6, "MUL", 60), uop(7, "STORE"), uop(8, "STORE"), uop(9, "SINK")]
  edges = [(0, 2), (1, 2), (2, 3), (3, 4), (1, 5), (3, 5), (5, 6), (6, 7), (3, 8), (6, 8), (4, 9), (7, 9), (8, 9)]
  graph = {"nodes": nodes, "edges": [{"src": str(a), "dst": str(b), "idx": 0} for a, b in edges]}
  sites = [site("linear", 10), site("relu", 10), site("sum", 11, backward=True)]
  groups = graph_groups.tensor_groups(graph, {"uops": 10, "ops": {}, "sink": 9, "sites": sites, "uop_sites": [[20, 0], [30, 1], [50, 2], [60, 2]]})
  by = {n["id"]: groups[n["group"]]["label"] if "group" in n else None for n in graph["nodes"]}
  assert by["2"] == by["3"] == by["0"] == by["4"] == "model.py:10 linear, relu"  # its buffer, its compute, the store of its result
  assert by["5"] == by["6"] == by["7"] == "model.py:11 backward: sum" and by["1"] is None  # read by two lines: between them, alone
  assert by["8"] is None and by["9"] is None  # a store of both lines' results, the SINK: each alone of its op, in no group
  assert [g["nodes"] for g in groups] == [4, 3] and groups[0]["ops"] == {"BUFFER": 1, "MUL": 1, "ADD": 1, "STORE": 1}
  assert graph_groups.tensor_groups(graph, {"uops": 10, "ops": {}, "sink": 9}) == []  # a trace recorded before sites: no groups

def test_a_tensor_graph_is_grouped_by_the_kernel_each_uop_ended_up_in():
  """by=kernel: each UOp the trace says a call computes (uop_calls) goes to that call's kernel, the kernels in schedule order, each
  holding the lines it fused besides the one most of it came from (a kernel of one line is the kernel's box alone); a buffer only
  one kernel reads joins it; a copy is named by its call; a trace recorded without uop_calls gets none."""
  nodes = [uop(0, "BUFFER"), uop(1, "MUL", 10), uop(2, "ADD", 11), uop(3, "REDUCE", 12), uop(4, "EXP2", 13), uop(5, "ADD", 14),
           uop(6, "COPY", 15), uop(7, "COPY", 16), uop(8, "SINK")]
  edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
  graph = {"nodes": nodes, "edges": [{"src": str(a), "dst": str(b), "idx": 0} for a, b in edges]}
  sites = [site("mul", 20), site("add", 21), site("exp", 22)]
  tensor_graph = {"uops": 9, "ops": {}, "sink": 8, "sites": sites, "uop_sites": [[10, 0], [11, 1], [12, 1], [13, 2], [14, 2]],
                  "uop_calls": [[10, 1], [11, 1], [12, 1], [13, 0], [14, 0], [15, 2], [16, 2], [99, 0], [10, 7]]}
  trace = {"tensor_graph": tensor_graph, "schedule": [{"index": 0, "kind": "kernel"}, {"index": 1, "kind": "kernel"}, {"index": 2, "kind": "copy"}],
           "kernels": [{"index": 0, "call": 0, "name": "E_4"}, {"index": 1, "call": 1, "name": "r_4_4"}]}
  groups = graph_groups.grouped("tensor", graph, trace, "kernel")
  assert [(g["label"], g["parent"], g["nodes"]) for g in groups] == [("kernel 0 E_4", None, 2), ("kernel 1 r_4_4", None, 4),
                                                                     ("call 2 copy", None, 3)]
  by = {n["id"]: groups[n["group"]]["label"] for n in graph["nodes"]}
  assert by["4"] == by["5"] == "kernel 0 E_4"  # one line's UOps: the kernel's box holds them, no box inside it
  assert by["2"] == by["3"] == by["1"] == by["0"] == "kernel 1 r_4_4"  # its home line's (most of it), a line of one UOp, its buffer
  assert by["6"] == by["7"] == by["8"] == "call 2 copy"  # a copy by its call; the SINK of its result joins it
  assert groups[1]["kernel"] == 1 and groups[1]["call"] == 1 and groups[2]["kernel"] is None and groups[2]["call"] == 2
  assert graph_groups.groupings("tensor", trace) == ["line", "kernel"] and graph_groups.groupings("ast", trace) is None
  del tensor_graph["uop_calls"]
  assert graph_groups.grouped("tensor", graph, trace, "kernel") == [] and graph_groups.groupings("tensor", trace) is None

def test_a_tensor_graphs_kernels_sit_in_the_module_objects_their_lines_ran_in():
  """by=kernel: a kernel is inside the module objects most of its UOps were made in (Block 1's in Block 1, inside Stack 0), one fused
  half and half across two objects in what they share (the Stack); module objects first, then the kernels beside them, in schedule
  order; a level holding one kernel alone is the kernel."""
  def scoped(fn: str, line: int, *objects: tuple[str, int]) -> dict:
    return {**site(fn, line), "scope": [{"cls": c, "index": i} for c, i in objects]}
  stack, b0, b1 = ("Stack", 0), ("Block", 0), ("Block", 1)
  sites = [scoped("mul", 20, stack, b0), scoped("add", 21, stack, b1), scoped("exp", 22, stack, b1)]
  nodes = [uop(i, op, 10 + i) for i, op in enumerate(["MUL", "MUL", "ADD", "ADD", "EXP2", "EXP2"])]
  graph = {"nodes": nodes, "edges": [{"src": str(i), "dst": str(i + 1), "idx": 0} for i in range(5)]}
  trace = {"tensor_graph": {"uops": 6, "ops": {}, "sink": 15, "sites": sites,
                            "uop_sites": [[10, 0], [11, 0], [12, 1], [13, 1], [14, 2], [15, 2]],
                            "uop_calls": [[10, 1], [11, 1], [12, 0], [13, 0], [14, 0], [15, 2]]},
           "schedule": [{"index": i, "kind": "kernel"} for i in range(3)],
           "kernels": [{"index": i, "call": i, "name": f"k{i}"} for i in range(3)]}
  groups = graph_groups.kernel_groups(graph, trace)
  rows = [(g["label"], groups[g["parent"]]["label"] if g["parent"] is not None else None) for g in groups]
  assert rows == [("Stack 0", None), ("Block 1", "Stack 0"), ("kernel 0 k0", "Block 1"), ("kernel 1 k1", "Stack 0")], rows
  # (Block 0 holds one kernel alone: the kernel is drawn, in the Stack)
  assert groups[2]["scope"] == [{"cls": "Stack", "index": 0}, {"cls": "Block", "index": 1}] and groups[2]["kernel"] == 0
  by = {n["id"]: groups[n["group"]]["label"] for n in graph["nodes"]}
  assert by["0"] == by["1"] == "kernel 1 k1" and by["2"] == by["3"] == by["4"] == "kernel 0 k0"  # its home line's, a line of one UOp
  assert by["5"] == "Block 1"  # a kernel of one UOp is no box: the UOp sits in its object
  s0, b_0, b_1 = graph_groups.Instance("Stack", 0), graph_groups.Instance("Block", 0), graph_groups.Instance("Block", 1)
  assert graph_groups.most_prefix([(s0, b_0), (s0, b_1)]) == (s0,) and graph_groups.most_prefix([]) == ()  # fused across blocks: in both's
  assert graph_groups.most_prefix([(s0, b_0), (s0, b_0), ("detach",)]) == (s0, b_0)  # most of it made in Block 0: there

def test_a_kernels_graph_is_grouped_by_its_loop_nest(web_client, small_trace):
  """Over a real kernel AST (the shared small trace's, whole): every node tinygrad says is inside loops (`ranges`, its UOp.ranges)
  is in the group of exactly those loops, labelled as END labels them; nodes outside every loop in none; every node is in the view."""
  kernels = web_client.get(f"/api/traces/{small_trace}/kernels").json()
  k = max(kernels, key=lambda k: k["ast_uops"])
  view = web_client.get(f"/api/traces/{small_trace}/graphs/ast/{k['index']}", params={"whole": 1}).json()
  assert view["total_nodes"] == view["shown_nodes"] == len(view["nodes"]) and not view["partial"] and view["groups"]
  ranges = {n["num"]: n for n in view["nodes"] if n["op"] == "RANGE"}
  assert ranges and all(r["ranges"] == [num] for num, r in ranges.items())  # a RANGE is inside itself, as tinygrad says
  for n in view["nodes"]:
    if "group" in n: assert set(view["groups"][n["group"]]["ranges"]) == set(n["ranges"]), n
    else: assert len(n.get("ranges", [])) == 0 or sum(1 for m in view["nodes"] if set(m.get("ranges", [])) == set(n["ranges"])) == 1, n
  for g in view["groups"]:  # each loop named by its RANGE's axis, as END names it: 4(6)
    names = g["label"].removeprefix("loops ").split()
    axes = [ranges[r]["label"].split("\n")[1].strip("()").split(",")[0] for r in g["ranges"]]
    assert len(names) == len(axes) and all(name.startswith(f"{axis}(") for name, axis in zip(names, axes, strict=True)), (g, axes)

def test_a_graph_over_the_node_limit_is_partial_and_whole_on_asking(web_client, small_trace):
  """The small trace's rangeify graph is over the 400-node limit: its view is cut (`partial`) and says so, its whole view keeps every
  node and edge; a graph under the limit is whole either way."""
  passes = web_client.get(f"/api/traces/{small_trace}/rangeify").json()["passes"]
  debuf = next(p["index"] for p in passes if p["name"] == "symbolic+reduce_collapse+debuf")  # the rangeify page's first graph
  base = f"/api/traces/{small_trace}/graphs/rangeify/{debuf}/before"
  cut, whole = web_client.get(base).json(), web_client.get(base, params={"whole": 1}).json()
  assert cut["partial"] and cut["shown_nodes"] < cut["total_nodes"] == whole["total_nodes"] == whole["shown_nodes"] == len(whole["nodes"])
  assert not whole["partial"] and not any(n.get("truncated") for n in whole["nodes"])
  small = web_client.get(f"/api/traces/{small_trace}/graphs/ast/0").json()
  assert not small["partial"] and small["shown_nodes"] == small["total_nodes"]

def test_a_programs_kernel_graph_is_grouped_by_realize_jit_and_line():
  """Each call goes to its realize's group of the line its kernel's provenance names first, named with the TinyJit that realize ran,
  inside its realize's group (a line of one call sits in its realize's); a buffer joins its writers' group, an input its readers'
  when they share one, and one between groups goes with its role's."""
  from explorer.present.graphs import kernel_graph
  line = lambda n: [{"fn": "conv2d", "file": "/m/model.py", "line": n, "backward": False}]
  kernels = [{"index": i, "provenance": line(5 if i % 2 == 0 else 6), "linear_uops": 1, "time_s": None, "flops": 0} for i in range(4)]
  call = lambda i, realize, reads, writes: {"index": i, "kernel": i, "kind": "kernel", "role": "r", "name": f"k{i}", "realize": realize,
                                            "reads": reads, "writes": writes}
  buffer = lambda i, role: {"index": i, "name": f"buf{i}", "role": role, "dtype": "float", "numel": 1, "nbytes": 4, "device": "CPU"}
  trace = {"kernels": kernels, "buffers": [buffer(0, "input"), buffer(1, "intermediate"), buffer(2, "output"), buffer(3, "output")],
           "schedule": [call(0, 0, [0], [1]), call(1, 0, [1], [2]), call(2, 1, [2], [3]), call(3, 1, [3], [2])],
           "realizes": [{"index": 0}, {"index": 1}], "jits": [{"index": 0, "kernels": [], "realizes": [1, 2], "runs": []}]}
  graph = kernel_graph(trace, "", whole=True)
  groups = graph_groups.call_groups(graph, trace)
  by = {n["id"]: groups[n["group"]]["label"] if "group" in n else None for n in graph["nodes"]}
  assert by["c0"] == by["b0"] == by["b1"] == "realize 0 · model.py:5 conv2d"  # its input, and what it wrote
  assert by["c1"] == "realize 0" and by["c3"] == "TinyJit 0 · realize 1"  # line 6: one call in each realize, in its realize's group
  parent = {g["label"]: groups[g["parent"]]["label"] if g["parent"] is not None else None for g in groups}
  assert parent == {"realize 0": None, "realize 0 · model.py:5 conv2d": "realize 0", "TinyJit 0 · realize 1": None,
                    "TinyJit 0 · realize 1 · model.py:5 conv2d": "TinyJit 0 · realize 1"}, parent  # (TinyJit 0 holds only realize 1)
  assert by["c2"] == "TinyJit 0 · realize 1 · model.py:5 conv2d" and by["b3"] == by["c2"]
  assert by["b2"] is None  # written in realize 0 and in realize 1: between groups (its role's, alone)
  assert {g["jit"] for g in groups} == {None, 0}
  assert graph_groups.call_groups(graph, {**trace, "realizes": []}) == []  # a convolution's trace: no groups

def test_a_line_run_inside_module_objects_is_grouped_within_them():
  """Sites recorded inside module objects (Stack 0 holding Block 0 and Block 1, each running lines 10 and 11) give groups within
  groups: each block inside the stack, in the order the capture met them, each line inside its block; a level that holds nothing but
  one smaller group is not drawn (the stack, were there one block); every node sits in the deepest group holding it."""
  stack = {"cls": "Stack", "index": 0}
  def inside(fn: str, line: int, block: int) -> dict: return {**site(fn, line), "scope": [stack, {"cls": "Block", "index": block}]}
  sites = [inside("linear", 10, 1), inside("relu", 11, 1), inside("linear", 10, 0), inside("relu", 11, 0)]
  nodes = [uop(i, "MUL" if i % 2 else "ADD", 100 + i) for i in range(8)] + [uop(8, "SINK")]
  edges = [{"src": str(a), "dst": str(b), "idx": 0} for a, b in [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7), (3, 8), (7, 8)]]
  pairs = [[100 + i, i // 2] for i in range(8)]  # two UOps per site: 0,1 line 10 of block 1; 2,3 line 11 of block 1; 4..7 block 0's
  groups = graph_groups.tensor_groups({"nodes": nodes, "edges": edges}, {"uops": 9, "ops": {}, "sink": 8, "sites": sites, "uop_sites": pairs})
  tree = [(g["label"], groups[g["parent"]]["label"] if g["parent"] is not None else None, g["nodes"]) for g in groups]
  assert tree == [("Stack 0", None, 8), ("Block 0", "Stack 0", 4), ("model.py:10 linear", "Block 0", 2), ("model.py:11 relu", "Block 0", 2),
                  ("Block 1", "Stack 0", 4), ("model.py:10 linear", "Block 1", 2), ("model.py:11 relu", "Block 1", 2)], tree
  assert [groups[n["group"]]["scope"][-1]["index"] for n in nodes[:8]] == [1, 1, 1, 1, 0, 0, 0, 0] and "group" not in nodes[8]
  one = [s for s in sites if s["scope"][1]["index"] == 1]
  again = [uop(i, "ADD", 100 + i) for i in range(4)]
  groups = graph_groups.tensor_groups({"nodes": again, "edges": []}, {"uops": 4, "ops": {}, "sink": 0, "sites": one, "uop_sites": pairs[:4]})
  assert [(g["label"], g["parent"]) for g in groups] == [("Block 1", None), ("model.py:10 linear", 0), ("model.py:11 relu", 0)]

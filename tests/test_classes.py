"""Live classes (explorer.web.routes.classes, static/live_class.js): against a real server, only the presenter's key moves a class,
each move reaches every student's event stream, the class holds at most class_max_students, presence is counted, a question's answers
are counted exactly (one per student, only from its students, none after the reveal), and a restarted server holds the class where
it was, answers included; in real Chromium tabs, students follow the presenter from page to page, one explores (the banner says so,
the presenter's counts too) and rejoins with F, and a tour step's question is answered on the students' screens and revealed."""
from __future__ import annotations
import json
import queue
import threading
import time
import httpx
import pytest
from conftest import needs_chromium
from servers import Server, wait_for
from stored_traces import stored_pair

def events(base: str, class_id: str, student: str, into: queue.Queue, stop: threading.Event) -> threading.Thread:
  """A student's stream in a thread of its own: each (event, data, arrival time) put on `into`, until the stream ends or `stop`."""
  def read() -> None:
    try: stream(into)
    except httpx.HTTPError: into.put(("closed", {}, time.time()))  # the server went (a restart)
  def stream(into: queue.Queue) -> None:
    with httpx.stream("GET", f"{base}/api/classes/{class_id}/events", params={"student": student}, timeout=30) as r:
      if r.status_code != 200:
        into.put(("refused", {"status": r.status_code, "retry_after": r.headers.get("retry-after"), "detail": r.read().decode()}, time.time()))
        return
      event = None
      for line in r.iter_lines():
        if stop.is_set(): return
        if line.startswith("event:"): event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event:
          into.put((event, json.loads(line.split(":", 1)[1]), time.time()))
          if event == "ended": return
  t = threading.Thread(target=read, daemon=True)
  t.start()
  return t

def next_event(q: queue.Queue, kind: str, timeout_s: float = 10) -> tuple[dict, float]:
  """The next `kind` event on q (others skipped): its data and arrival time."""
  end = time.time() + timeout_s
  while (left := end - time.time()) > 0:
    event, data, at = q.get(timeout=left)
    if event == kind: return data, at
  raise AssertionError(f"no {kind} event within {timeout_s} s")

def test_a_class_is_moved_by_its_key_alone_reaches_every_student_and_outlives_a_restart(tmp_path):
  server = Server(tmp_path / "c.sqlite3", tmp_path / "server.log", KERNEL_EXPLORER_CLASS_MAX_STUDENTS="3").start()
  stop = threading.Event()
  try:
    base = server.base
    r = httpx.post(f"{base}/api/classes", json={"url": "/"})
    assert r.status_code == 201, r.text
    c = r.json()
    cid, key = c["id"], c["presenter_key"]
    assert c["join_url"] == f"/c/{cid}" and c["state"] == {"url": "/", "view": {}} and c["seq"] == 0 and len(key) >= 32
    assert "presenter_key" not in httpx.get(f"{base}/api/classes/{cid}").json()  # said once, to the teacher
    move = lambda body, k=key: httpx.put(f"{base}/api/classes/{cid}/state", json=body, headers={"X-Presenter-Key": k} if k else {})  # noqa: E731
    assert move({"url": "/traces"}, None).status_code == 403 and move({"url": "/traces"}, "not-the-key").status_code == 403
    for bad in ("//evil.example/", "https://evil.example/", "traces", "/" + "a" * 2000):
      assert move({"url": bad}).status_code == 422, bad
    assert move({"url": "/", "view": {"zoom": 2}, "script": "x"}).status_code == 422  # nothing but {url, view}

    students = {name: queue.Queue() for name in ("student-aaaa", "student-bbbb", "student-cccc")}
    for name, q in students.items(): events(base, cid, name, q, stop)
    for q in students.values(): assert next_event(q, "state")[0] == {"state": {"url": "/", "view": {}}, "seq": 0}
    full: queue.Queue = queue.Queue()
    events(base, cid, "student-dddd", full, stop)
    refused, _ = next_event(full, "refused")
    assert refused["status"] == 503 and refused["retry_after"] and "3 students" in refused["detail"]
    assert httpx.get(f"{base}/api/classes/{cid}/events", params={"student": "x"}).status_code == 422  # no id a browser makes

    sent = time.time()
    assert move({"url": "/traces", "view": {"panel": "notes"}}).json()["seq"] == 1
    for q in students.values():
      got, at = next_event(q, "state")
      assert got == {"state": {"url": "/traces", "view": {"panel": "notes"}}, "seq": 1} and at - sent < 1.0, at - sent

    assert httpx.post(f"{base}/api/classes/{cid}/presence", json={"student": "student-aaaa", "following": False, "page": "/docs"}).status_code == 204
    wait_for("the exploring student counted", lambda: httpx.get(f"{base}/api/classes/{cid}").json()["counts"] ==
             {"following": 2, "exploring": 1, "pages": [{"page": "/docs", "students": 1}]}, 10)
    ask = lambda body, k=key: httpx.put(f"{base}/api/classes/{cid}/question", json=body, headers={"X-Presenter-Key": k} if k else {})  # noqa: E731
    answer = lambda s, a, q="faster": httpx.post(f"{base}/api/classes/{cid}/answers", json={"student": s, "question": q, "answer": a})  # noqa: E731
    question = {"id": "faster", "kind": "choice", "prompt": "Which is faster, A or B?", "choices": ["A", "B"]}
    assert ask(question, None).status_code == 403 and answer("student-aaaa", "A").status_code == 409  # nothing asked yet
    assert ask({**question, "choices": ["A"]}).status_code == 422 and ask({**question, "answer": "B"}).status_code == 422  # no answer in it
    assert ask(question).json()["poll"] == {"question": question, "answers": [], "total": 0, "revealed": None}
    assert next_event(students["student-bbbb"], "poll")[0]["question"] == question
    given = (("student-aaaa", "A"), ("student-bbbb", "B"), ("student-cccc", "B"), ("student-bbbb", "A"))
    assert [answer(s, a).status_code for s, a in given] == [204] * 4
    assert answer("student-cccc", "C").status_code == 422 and answer("student-eeee", "A").status_code == 409  # not a choice; not a student
    assert answer("student-aaaa", "A", "another").status_code == 409
    polled = httpx.get(f"{base}/api/classes/{cid}").json()["poll"]
    assert polled["answers"] == [{"answer": "A", "students": 2}, {"answer": "B", "students": 1}] and polled["total"] == 3  # bbbb changed
    reveal = lambda k: httpx.post(f"{base}/api/classes/{cid}/reveal", json={"answer": "B"}, headers={"X-Presenter-Key": k})  # noqa: E731
    assert reveal("wrong").status_code == 403 and reveal(key).json()["poll"]["revealed"] == "B"
    wait_for("the reveal on a student's stream", lambda: next_event(students["student-cccc"], "poll")[0]["revealed"] == "B", 10)
    assert answer("student-cccc", "A").status_code == 409  # revealed: answers are closed
    page = httpx.get(f"{base}/c/{cid}")
    assert page.status_code == 200 and f'data-class-join="{cid}"' in page.text and "/traces" in page.text
    assert httpx.get(f"{base}/c/no-such-class").status_code == 404

    stop.set()
    server.stop()
    server.start()  # a restart: the class is where the presenter left it, the key still moves it
    got = httpx.get(f"{server.base}/api/classes/{cid}").json()
    assert got["state"] == {"url": "/traces", "view": {"panel": "notes"}} and got["seq"] == 1 and got["counts"]["following"] == 0
    assert got["poll"]["answers"] == polled["answers"] and got["poll"]["revealed"] == "B"  # answers kept, counted as before
    stop = threading.Event()
    back: queue.Queue = queue.Queue()
    events(server.base, cid, "student-aaaa", back, stop)
    assert next_event(back, "state")[0]["state"]["url"] == "/traces"  # a student reconnecting lands on the current state
    assert httpx.put(f"{server.base}/api/classes/{cid}/state", json={"url": "/studies"}, headers={"X-Presenter-Key": key}).json()["seq"] == 2
    assert next_event(back, "state")[0] == {"state": {"url": "/studies", "view": {}}, "seq": 2}
    assert httpx.delete(f"{server.base}/api/classes/{cid}", headers={"X-Presenter-Key": "wrong"}).status_code == 403
    assert httpx.delete(f"{server.base}/api/classes/{cid}", headers={"X-Presenter-Key": key}).status_code == 204
    next_event(back, "ended")
    assert httpx.get(f"{server.base}/api/classes/{cid}").status_code == 404
  finally:
    stop.set()
    server.stop()

def path_of(page) -> str: return page.evaluate("location.pathname + location.search")

STUDENTS = 8

def step(page) -> None:
  """The tour's next step, by its own key."""
  with page.expect_navigation(): page.keyboard.press("ArrowRight")

@pytest.mark.browser
@needs_chromium
def test_eight_students_follow_a_tour_answer_explore_rejoin_and_outlive_a_restart(browser, tmp_path):
  """A teacher and eight students, each a Chromium tab: every student's tour step is the teacher's within 2 s of each step, put in
  place on its tab (no page load); the tensor step's question is answered on the students' screens, counted exactly and revealed; one
  student explores (its banner and the teacher's counts say so) and rejoins with F; the server restarts mid-class and every tab
  carries on."""
  db, staged, _ = stored_pair()  # a tour to teach: the staged Winograd trace's
  server = Server(db, tmp_path / "server.log").start()
  errors: list[str] = []
  def opened(url: str):
    p = browser.new_page(viewport={"width": 1024, "height": 768})
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(url)
    return p
  base = server.base
  try:
    teacher = opened(f"{base}/t/{staged}/tour?step=tensor")
    teacher.click("[data-class-start]")
    teacher.wait_for_selector(".class-bar.presenter .class-qr svg")
    cid = teacher.evaluate("JSON.parse(sessionStorage.getItem('ke-class')).id")
    assert f"/c/{cid}" in teacher.inner_text(".class-bar.presenter")
    students = [opened(f"{base}/c/{cid}") for _ in range(STUDENTS)]
    def all_at(where: str, who=None, timeout_ms: int = 2000) -> None:
      for s in who or students: s.wait_for_function(f"location.pathname + location.search === {where!r}", timeout=timeout_ms)
    all_at(f"/t/{staged}/tour?step=tensor", timeout_ms=10_000)
    for s in students: s.wait_for_selector(".class-bar.student:not(.exploring)")

    kernels = len(httpx.get(f"{base}/api/traces/{staged}/raw").json()["kernels"])
    teacher.click("[data-class-ask]")
    given = [kernels if i < 5 else kernels + 1 for i in range(STUDENTS)]
    for s, n in zip(students, given, strict=True):
      s.wait_for_selector(".class-poll input[type=number]")
      s.fill(".class-poll input[type=number]", str(n))
      s.press(".class-poll input[type=number]", "Enter")
    teacher.wait_for_function(f"document.querySelector('.class-poll').textContent.includes('{STUDENTS} answered')", timeout=10_000)
    assert httpx.get(f"{base}/api/classes/{cid}").json()["poll"]["answers"] == [{"answer": str(kernels), "students": 5},
                                                                                 {"answer": str(kernels + 1), "students": 3}]
    teacher.click("[data-class-reveal]")
    for s, n in zip(students, given, strict=True):
      mine = "yours too" if n == kernels else f"yours: {n}"
      s.wait_for_function(f"document.querySelector('.class-poll .class-answer')?.textContent === 'Answer: {kernels} · {mine}'", timeout=5000)

    for s in students: s.evaluate("window.sameDocument = true")
    for _ in range(3):  # the tour's next steps, by its own key
      step(teacher)
      all_at(path_of(teacher))
      shown = teacher.evaluate("document.querySelector('#tour').dataset.step")
      assert all(s.evaluate("document.querySelector('#tour').dataset.step") == shown for s in students)
    assert all(s.evaluate("window.sameDocument === true") for s in students)  # each step put in place, not a page load per tab
    away = students[0]
    away.go_back()  # Back from a step put in place: the step before, loaded (the URL and the page agree), and the tab explores
    away.wait_for_function("window.sameDocument === undefined && !!document.querySelector('.class-bar.student.exploring')", timeout=10_000)
    assert away.evaluate("new URL(location.href).searchParams.get('step') === document.querySelector('#tour').dataset.step")
    assert path_of(away) != path_of(teacher)
    away.goto(f"{base}/traces")  # a student explores on its own
    away.wait_for_selector(".class-bar.student.exploring")
    assert "You left the class" in away.inner_text(".class-bar")
    teacher.wait_for_function(f"document.querySelector('.class-counts').textContent.startsWith('{STUDENTS - 1} following · 1 exploring (on /traces')",
                              timeout=10_000)
    step(teacher)
    all_at(path_of(teacher), students[1:])
    assert path_of(away) == "/traces"  # exploring: the move did not take it along

    server.stop()
    server.start()  # mid-class: the streams reconnect, the class is where the teacher left it
    assert server.base == base
    step(teacher)
    all_at(path_of(teacher), students[1:], timeout_ms=15_000)  # the browsers' reconnect (EventSource retries after a few seconds)
    step(teacher)
    all_at(path_of(teacher), students[1:])  # and within 2 s again once reconnected
    away.keyboard.press("f")
    all_at(path_of(teacher), [away])
    away.wait_for_selector(".class-bar.student:not(.exploring)")
    teacher.wait_for_function(f"document.querySelector('.class-counts').textContent.startsWith('{STUDENTS} following · 0 exploring')",
                              timeout=10_000)
    teacher.click("[data-class-end]")
    students[1].wait_for_function("document.querySelector('.class-bar').textContent.includes('The class ended')", timeout=5000)
    assert not errors, errors
  finally:
    server.stop()

@pytest.mark.browser
@needs_chromium
def test_students_follow_what_the_url_does_not_hold(browser, tmp_path):
  """On a kernel page, each of the teacher's moves that its address does not hold reaches two students' tabs (one of another size)
  within a second: the selected UOp of the AST graph, that graph's zoom and the point at its middle, a pinned source line, an opened
  panel."""
  db, staged, _ = stored_pair()
  server = Server(db, tmp_path / "server.log").start()
  errors: list[str] = []
  def opened(url: str, width: int = 1024, height: int = 768):
    p = browser.new_page(viewport={"width": width, "height": height})
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(url)
    return p
  loaded = "document.querySelector('#ast-graph')?.dataset.loaded?.startsWith('ast/')"
  placement = "(() => { const v = window.explorerViewers.get('ast-graph'); return v && v.placement(); })()"
  try:
    teacher = opened(f"{server.base}/t/{staged}/k/1")
    teacher.click("[data-class-start]")
    teacher.wait_for_selector(".class-bar.presenter .class-qr svg")
    cid = teacher.evaluate("JSON.parse(sessionStorage.getItem('ke-class')).id")
    students = [opened(f"{server.base}/c/{cid}"), opened(f"{server.base}/c/{cid}", 1280, 900)]
    for s in students:
      s.wait_for_function(f"location.pathname === '/t/{staged}/k/1'", timeout=10_000)
      s.wait_for_function(loaded, timeout=10_000)
    teacher.wait_for_function(loaded, timeout=10_000)
    node = teacher.evaluate("document.querySelector('#ast-graph g.node').id")
    clicked = f"document.querySelector(\"#ast-graph g.node[id='{node}']\").dispatchEvent(new MouseEvent('click', {{bubbles: true}}))"
    teacher.evaluate(clicked)  # wherever it is drawn, in view or not
    for s in students:
      s.wait_for_function(f"document.querySelector('#ast-graph g.node.selected')?.id === '{node}'", timeout=1000)
    teacher.click("#ast-graph [data-act=zoom-in]")
    teacher.click("#ast-graph [data-act=zoom-in]")
    teacher.evaluate("window.explorerViewers.get('ast-graph').pz.panBy({x: 40, y: -30})")
    time.sleep(0.3)  # the teacher's pan is told a few times a second, not per frame
    want = teacher.evaluate(placement)
    for s in students:
      s.wait_for_function(f"(() => {{ const p = {placement}, w = {json.dumps(want)}; return p && Math.abs(p.zoom / w.zoom - 1) < 0.01 && "
                          "Math.abs(p.cx - w.cx) < 1 && Math.abs(p.cy - w.cy) < 1; })()", timeout=1000)
    line = teacher.evaluate("document.querySelector('.line-mapped .lm-line').dataset.line")
    teacher.click(f".line-mapped .lm-source [id='S-{line}']")
    for s in students:
      s.wait_for_function(f"document.querySelector('.line-mapped.lm-pinned [id=\"S-{line}\"].lm-hot') !== null", timeout=1000)
    teacher.click("#opts-panel > summary")
    for s in students: s.wait_for_function("document.querySelector('#opts-panel').open", timeout=1000)
    assert not errors, errors
  finally:
    server.stop()

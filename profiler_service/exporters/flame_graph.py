"""The report page's flame graph of the job's Python stacks (`python.stacks.folded`), drawn on
the server as the other charts are.

Only the threads that ran the user's code are drawn (a sample whose stack holds a frame of the
user's): the profiler's own threads and idle library threads would fill it otherwise. The root
is at the top (an icicle, as speedscope's "left heavy" view), a box's width its share of those
samples; the user's frames are merged by function and file and highlighted, each run of library
frames between them is one grey box named for its package (`tensorflow · 23 frames`), its title
naming the innermost frame, so the user's own code stays in view on stacks 60 frames deep.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePath

from markupsafe import Markup, escape

from profiler_service.analysis.readers.python_stacks import Frame, UserCode, read_stacks

__all__ = ["USER_COLOUR", "flame_graph_svg"]

USER_COLOUR = "#f28e2b"  # the user's frames
LIBRARY_COLOUR = "#d9d9d9"
THREAD_COLOUR = "#9ecae1"
ROW = 17  # a frame's height, in pixels
MIN_WIDTH = 0.5  # boxes narrower than this (pixels) are not drawn, nor what they called
MAX_DEPTH = 40  # rows drawn at most; deeper frames are left out (the file holds them)
_CHAR = 6.2  # an 11px character's width, to fit labels
_SITE = re.compile(r"[/\\](?:site-packages|dist-packages)[/\\](?P<package>[^/\\]+)")
_THREAD_ID = re.compile(r"\s*\(tid \d+\)$")


@dataclass
class _Node:
    label: str
    user: bool = False
    count: int = 0
    lines: Counter[int] = field(default_factory=Counter)  # the user's frame: its lines' samples
    frames: Counter[int] = field(default_factory=Counter)  # a library run: its lengths' samples
    children: dict[tuple[str, bool], _Node] = field(default_factory=dict)

    def child(self, label: str, user: bool) -> _Node:
        node = self.children.get((label, user))
        if node is None:
            node = self.children[(label, user)] = _Node(label, user)
        return node


def flame_graph_svg(folded: str, library_roots: list[str], width: int = 900) -> Markup:
    """The flame graph of collapsed stacks; empty where no thread ran the user's code."""
    root, total = _tree(folded, library_roots)
    if not total:
        return Markup("")
    boxes: list[str] = []
    depth = _draw(root, 0.0, 0, width / total, boxes)
    height = (depth + 1) * ROW
    caption = f"{total} samples of the threads that ran your code"
    return Markup(
        f'<svg class="chart" id="flame-graph" viewBox="0 0 {width} {height}" width="100%" '
        f'height="{height}" role="img" aria-label="flame graph: {caption}" '
        f'font-size="11" font-family="monospace">{"".join(boxes)}</svg>'
    )


def _tree(folded: str, library_roots: list[str]) -> tuple[_Node, int]:
    is_user = UserCode(library_roots)
    root = _Node("all")
    total = 0
    for thread, frames, count in read_stacks(folded):
        if not any(is_user(f.file) for f in frames):
            continue
        total += count
        node = root.child(_THREAD_ID.sub("", thread) or "thread", False)
        node.count += count
        run: list[Frame] = []
        for frame in [*frames, None]:
            if frame is not None and not is_user(frame.file):
                run.append(frame)
                continue
            if run:
                node = node.child(f"{_package(run[0].file)}: {_entry(run)}", False)
                node.count += count
                node.frames[len(run)] += count
                if frame is None and len(run) > 1:  # where the stack ended: what it ran
                    node = node.child(run[-1].function, False)
                    node.count += count
                    node.frames[1] += count
                run = []
            if frame is not None:
                node = node.child(f"{frame.function} ({PurePath(frame.file).name})", True)
                node.count += count
                node.lines[frame.line] += count
    return root, total


def _draw(node: _Node, x: float, depth: int, scale: float, boxes: list[str]) -> int:
    """Draw `node`'s children from `x` on row `depth`; the deepest row drawn."""
    deepest = depth - 1
    if depth >= MAX_DEPTH:
        return deepest
    for child in sorted(node.children.values(), key=lambda c: -c.count):
        w = child.count * scale
        if w < MIN_WIDTH:
            continue
        boxes.append(_box(child, x, depth, w))
        deepest = max(deepest, depth, _draw(child, x, depth + 1, scale, boxes))
        x += w
    return deepest


def _box(node: _Node, x: float, depth: int, w: float) -> str:
    total = node.count
    if node.user:
        line, _ = node.lines.most_common(1)[0]
        label = node.label.replace(")", f":{line})")
        fill, cls = USER_COLOUR, "frame user"
        title = f"{label}: {total} samples"
    elif depth == 0:
        label, fill, cls = node.label, THREAD_COLOUR, "frame thread"
        title = f"thread {label}: {total} samples"
    else:
        label, fill, cls = node.label, LIBRARY_COLOUR, "frame library"
        frames = min(node.frames), max(node.frames)
        span = str(frames[0]) if frames[0] == frames[1] else f"{frames[0]}-{frames[1]}"
        plural = "s" if frames[1] > 1 else ""
        title = f"{label} ({span} library frame{plural}): {total} samples"
    fits = int((w - 6) / _CHAR)
    text = ""
    if fits >= 3:
        shown = label if len(label) <= fits else label[: fits - 1] + "…"
        weight = ' font-weight="bold"' if node.user else ""
        text = f'<text x="{x + 3:.2f}" y="{depth * ROW + 12}"{weight}>{escape(shown)}</text>'
    return (
        f'<g class="{cls}"><rect x="{x:.2f}" y="{depth * ROW}" width="{max(w - 0.5, 0.3):.2f}" '
        f'height="{ROW - 1}" fill="{fill}"/>{text}<title>{escape(title)}</title></g>'
    )


def _entry(run: list[Frame]) -> str:
    """The function a library was entered by: its first frame that is no decorator's closure
    (TensorFlow wraps its API in `filter_traceback.<locals>.error_handler`)."""
    return next((f.function for f in run if "<locals>" not in f.function), run[0].function)


def _package(file: str) -> str:
    """The package a library frame is in: its folder in site-packages, else Python's own."""
    m = _SITE.search(file)
    if m:
        return m["package"].removesuffix(".py")
    if "__autograph_generated_file" in file:
        return "autograph"
    if re.search(r"[/\\]profiler_service[/\\]", file):
        return "profiler_service"
    return "python"

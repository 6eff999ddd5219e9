"""What a demanding user sees wrong on a page, found in the real browser: text cut off, text drawn over
other text inside a chart, numbers with more decimals than the app's formats (pipesim.units) print.

Each check returns what it found (empty: nothing wrong), so a failing test names the offending text.
"""

from __future__ import annotations

import re

from pipesim.units import PERCENT_DECIMALS, TIME_DECIMALS

# Text cut off: an element showing text in one line (ellipsis, or hidden overflow without wrapping) whose text is
# wider than the element, on screen (a closed expander's or popover's content has no boxes). Streamlit's metric
# values, select boxes and labels cut their text so.
TRUNCATED = """() => {
  const found = [];
  for (const el of document.querySelectorAll('[data-testid=stApp] *')) {
    const box = el.getBoundingClientRect();
    if (box.width < 2 || box.height < 2 || box.right <= 0 || box.bottom <= 0 || !el.textContent.trim()) continue;
    if (el.querySelector('div, svg, canvas, img, input, textarea, table, button')) continue;  // text, not a layout
    const s = getComputedStyle(el);
    const oneLine = s.textOverflow === 'ellipsis' || (s.overflowX === 'hidden' && s.whiteSpace === 'nowrap');
    if (oneLine && el.scrollWidth > el.clientWidth + 1) found.push(el.textContent.trim().slice(0, 80));
  }
  return found;
}"""

# Text over text inside a chart: titles, subtitles, annotations (subplot titles), axis titles, tick labels and
# legend entries, pairwise, by their boxes on screen (a few pixels of touching allowed). Labels inside bars and
# on graph nodes are plotly's to hide or place.
OVERLAPPING = """() => {
  const found = [];
  const parts = '.gtitle, .annotation-text, .legendtext, .g-xtitle text, .g-ytitle text, .xtick text, .ytick text, '
    + '.g-x2title text, .g-x3title text, .g-y2title text, .g-y3title text, .x2tick text, .x3tick text, '
    + '.y2tick text, .y3tick text';
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const boxes = [...plot.querySelectorAll(parts)]
      .filter(el => el.textContent.trim() && el.getClientRects().length)
      .map(el => [el.textContent.trim(), el.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [a, r] = boxes[i], [b, q] = boxes[j];
        const w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
        const h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
        if (w > 2 && h > 2) found.push(`${a.slice(0, 40)} / ${b.slice(0, 40)}`);
      }
    }
  }
  return found;
}"""

# The words a user reads: cards, markdown, captions, alerts, chart titles and annotations (not logs or code; a
# table's cells are drawn on a canvas, formatted by their column, and its accessible copy holds raw values).
SHOWN_TEXT = """() => [...document.querySelectorAll(
  '[data-testid=stMain] [data-testid=stMetric], [data-testid=stMain] [data-testid=stMarkdownContainer], '
  + '[data-testid=stMain] [data-testid=stCaptionContainer], .js-plotly-plot .gtitle, '
  + '.js-plotly-plot .annotation-text')]
  .filter(el => !el.closest('[data-testid=stCode]'))
  .map(el => el.textContent)"""

# A number's decimals past the app's formats: ms and bytes TIME_DECIMALS (2), percentages PERCENT_DECIMALS (1).
# Version numbers (3.7.0) and dotted names are not numbers.
TOO_MANY_DECIMALS = re.compile(rf"(?<![\d.])\d[\d,]*\.\d{{{TIME_DECIMALS + 1},}}(?![\d.])")
TOO_MANY_PERCENT = re.compile(rf"(?<![\d.])\d[\d,]*\.\d{{{PERCENT_DECIMALS + 1},}}%")


def truncated(page) -> list[str]:
    return page.evaluate(TRUNCATED)


def overlapping(page) -> list[str]:
    return page.evaluate(OVERLAPPING)


def long_numbers(page) -> list[str]:
    found = []
    for text in page.evaluate(SHOWN_TEXT):
        found += TOO_MANY_DECIMALS.findall(text) + TOO_MANY_PERCENT.findall(text)
    return found


def problems(page) -> dict[str, list[str]]:
    """Every check at once; {} when the page is clean."""
    found = {"truncated": truncated(page), "overlapping": overlapping(page), "decimals": long_numbers(page)}
    return {name: items for name, items in found.items() if items}

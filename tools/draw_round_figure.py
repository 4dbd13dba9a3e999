"""Draw chapter 1's figure of one draft-and-verify round: book/_static/draft_verify_round.svg.

A plain SVG (no plotly: chapter 1 is a markdown page, read without a kernel), drawn in one
column 444 units wide so that it still reads when a phone shrinks it to about 350 px.
Run ``python tools/draw_round_figure.py`` after changing it, and commit both files.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "book" / "_static" / "draft_verify_round.svg"

WIDTH = 444
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
GREY, DRAFT, TARGET = "#e8e8e8", "#d6e6f5", "#fde3c8"
ACCEPT_FILL, REJECT_FILL = "#dcefdc", "#f7dada"
GOOD, BAD, INK, SOFT = "#2e7d32", "#c62828", "#222222", "#555555"

CONTEXT = "The cat sat"
DRAFTED = ["on", "the", "mat", "and"]
ACCEPTED = 2  # "on", "the" accepted; "mat" rejected, so "and" is discarded
CORRECTION = "rug"

X0, CTX_W, COL_W, GAP = 4, 96, 62, 6  # the context box, then one column per position
SUB = "₀₁₂₃₄₅₆₇₈₉"


def col(i: int) -> float:
    """Left edge of position i (0 = first drafted token, 4 = the bonus position)."""
    return X0 + CTX_W + GAP + i * (COL_W + GAP)


def box(x, y, w, h, fill, text="", stroke=INK, dash="", size=20, color=INK, strike=False):
    dash_attr = f" stroke-dasharray='{dash}'" if dash else ""
    out = [f"<rect x='{x}' y='{y}' width='{w}' height='{h}' rx='6' fill='{fill}' "
           f"stroke='{stroke}' stroke-width='1.5'{dash_attr}/>"]
    if text:
        deco = " text-decoration='line-through'" if strike else ""
        out.append(f"<text x='{x + w / 2}' y='{y + h / 2 + size * 0.35}' font-size='{size}' "
                   f"text-anchor='middle' fill='{color}'{deco}>{text}</text>")
    return out


def label(y, number, text):
    return [f"<text x='{X0}' y='{y}' font-size='19' font-weight='bold' fill='{INK}'>"
            f"{number}. {text}</text>"]


def note(x, y, text, size=16, color=INK, anchor="start"):
    return [f"<text x='{x}' y='{y}' font-size='{size}' fill='{color}' "
            f"text-anchor='{anchor}'>{text}</text>"]


def arrow(x1, y1, x2, y2, color=INK):
    return [f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{color}' "
            f"stroke-width='1.5' marker-end='url(#head)'/>"]


def tokens_row(y, marks=False):
    """The context and the drafted tokens; with ``marks``, as the verification left them."""
    out = box(X0, y, CTX_W, 44, GREY, CONTEXT, size=15)
    for i, tok in enumerate(DRAFTED):
        if not marks:
            out += box(col(i), y, COL_W, 44, DRAFT, tok, size=19)
        elif i < ACCEPTED:
            out += box(col(i), y, COL_W, 44, ACCEPT_FILL, f"{tok} ✓", stroke=GOOD, size=17)
        elif i == ACCEPTED:
            out += box(col(i), y, COL_W, 44, REJECT_FILL, f"{tok} ✗", stroke=BAD, size=17)
        else:
            out += box(col(i), y, COL_W, 44, "#ffffff", tok, stroke="#9e9e9e", dash="5 4",
                       size=17, color="#9e9e9e")
    return out


def draw() -> str:
    s = []
    # 1. draft
    s += label(26, 1, "Draft: p proposes L = 4 tokens")
    s += tokens_row(40)
    for i in range(len(DRAFTED)):  # each drafted token is fed back to draft the next
        x = col(i) - GAP - (CTX_W if i == 0 else COL_W) / 2
        s += [f"<path d='M {x} 88 Q {(x + col(i) + COL_W / 2) / 2} 108 "
              f"{col(i) + COL_W / 2 - 6} 90' fill='none' stroke='#1f4e79' "
              f"stroke-width='1.5' marker-end='url(#head)'/>"]
    s += note(X0, 132, "one cheap pass of p per token,", size=16, color="#1f4e79")
    s += note(X0, 152, "each fed the tokens before it", size=16, color="#1f4e79")
    # 2. verify
    s += label(194, 2, "Verify: one pass of the target q")
    s += [f"<text x='{X0 + 22}' y='216' font-size='19' font-weight='bold' fill='{INK}'>"
          "scores all L + 1 positions</text>"]
    s += box(X0, 230, WIDTH - 2 * X0, 38, TARGET, "target q: one forward pass", size=17)
    for i in range(len(DRAFTED) + 1):
        cx = col(i) + COL_W / 2
        s += arrow(cx, 268, cx, 286)
        s += note(cx, 308, f"q{SUB[i + 1]}", size=19, anchor="middle")
    s += note(col(4) + COL_W / 2, 328, "(bonus)", size=14, color=SOFT, anchor="middle")
    s += note(X0, 304, "laws of the", size=15, color=SOFT)
    s += note(X0, 322, "next token:", size=15, color=SOFT)
    # 3. accept a prefix, one more token
    s += label(370, 3, "Accept a prefix, add one token")
    s += note(X0, 394, "token i is kept with probability min(1, q(xᵢ)/p(xᵢ)),", size=15,
              color=SOFT)
    s += note(X0, 413, "up to the first rejection", size=15, color=SOFT)
    s += tokens_row(426, marks=True)
    s += note(col(3) + COL_W / 2, 490, "discarded", size=14, color=SOFT, anchor="middle")
    cx = col(ACCEPTED) + COL_W / 2
    s += arrow(cx, 470, cx, 496, color=GOOD)
    s += box(col(ACCEPTED), 498, COL_W, 44, "#ffffff", CORRECTION, stroke=GOOD, size=19)
    s += note(col(ACCEPTED) + COL_W + 8, 516, "correction, from", size=15, color=GOOD)
    s += note(col(ACCEPTED) + COL_W + 8, 535, "the residual", size=15, color=GOOD)
    s += note(X0, 580, "This round emits “on the rug”: 3 tokens", size=17)
    s += note(X0, 602, "for one target pass. Had all 4 drafted", size=17)
    s += note(X0, 624, "tokens been accepted, a bonus token from", size=17)
    s += note(X0, 646, "q₅ would have made 5.", size=17)
    height = 660
    title = "One round of speculative decoding"
    desc = ("The draft model p proposes four tokens after the context 'The cat sat': "
            "on, the, mat, and. One forward pass of the target model q scores all "
            "five positions. The verification accepts 'on' and 'the', rejects 'mat' "
            "(the 'and' after it is discarded) and draws the correction 'rug' from "
            "the residual, so the round emits three tokens; had all four been accepted, "
            "a bonus token from q would have made five.")
    head = (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH} {height}' "
            f"width='{WIDTH}' height='{height}' role='img' "
            f"aria-labelledby='round-title round-desc' {FONT}>\n"
            f"<title id='round-title'>{title}</title>\n<desc id='round-desc'>{desc}</desc>\n"
            "<defs><marker id='head' viewBox='0 0 10 10' refX='9' refY='5' "
            "markerWidth='7' markerHeight='7' orient='auto-start-reverse'>"
            f"<path d='M 0 0 L 10 5 L 0 10 z' fill='{INK}'/></marker></defs>\n"
            f"<rect width='{WIDTH}' height='{height}' fill='#ffffff'/>\n")
    return head + "\n".join(s) + "\n</svg>\n"


if __name__ == "__main__":
    OUT.write_text(draw(), encoding="utf-8")
    print(f"wrote {OUT}")

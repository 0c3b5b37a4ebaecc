"""Screenshot of a rendered Markdown answer with code in the heatmap (no server needed).

Builds a short conversation whose answer has a heading, emphasis, a list, a link, inline
code, a fenced Python block and a table, with brightness varied so the chunk colours and
the highlight show, and captures the view as the screen shows it:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_markdown.py [--out docs/screenshots] [--table]

Saves markdown_answer.png in --out (with ``--table``: markdown_table.png, an answer whose
table has cells of different lengths, unpadded in the source); prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from halo_weave.conversation import Conversation  # noqa: E402
from halo_weave.settings import Settings  # noqa: E402

ANSWER = """## Converting temperatures

Here is a **small** function, with *type hints*, that turns `celsius` into Fahrenheit:

```python
def celsius_to_fahrenheit(celsius: float) -> float:
    \"\"\"Degrees Celsius in, degrees Fahrenheit out.\"\"\"
    return celsius * 9 / 5 + 32  # 0 °C is 32 °F
```

- Water freezes at **0 °C** (32 °F)
- It boils at *100 °C* (212 °F)

| °C | °F |
|----|----|
| 20 | 68 |

See [the formula](https://en.wikipedia.org/wiki/Fahrenheit) for more."""

TABLE_ANSWER = """## Boiling points

| Liquid | °C | Note |
|---|---:|:---:|
| water | 100 | at sea level |
| **ethanol** | 78.4 | `C2H5OH` |
| liquid nitrogen | -195.8 | cold |
| mercury | 356.7 | *toxic* |

Columns line up although the model padded nothing."""


def tokens(text: str) -> list[str]:
    """Model-like pieces: words with their leading space, marks and newlines alone."""
    return re.findall(r"\n+|[ ]?[A-Za-z_°0-9]+|[ ]?[^\sA-Za-z_°0-9]+|[ ]+", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots")
    parser.add_argument("--table", action="store_true", help="an answer with a table instead")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    from halo_weave.ui.heatmap import HeatmapView
    from halo_weave.ui.theme import apply_dark_theme

    apply_dark_theme(app)
    conv = Conversation(Settings.of(min_chunk_tokens=12, highlight_fraction=0.1))
    conv.set_system_prompt("You are a helpful assistant.", [1], ["You are a helpful assistant."])
    question = tokens("Which liquids boil when?" if args.table else
                      "Write a **Python** function that converts Celsius to Fahrenheit.")
    conv.add_turn("user", list(range(len(question))), question)
    text = TABLE_ANSWER if args.table else ANSWER
    answer = tokens(text)
    assert "".join(answer) == text
    conv.add_turn("assistant", list(range(len(answer))), answer)
    rng = np.random.default_rng(3)
    for _ in range(6):
        attention = rng.random(conv.live_token_count()).astype(np.float32) ** 6
        conv.apply_attention(attention / attention.sum())
    view = HeatmapView()
    view.resize(860, 640)
    view.show()
    view.set_conversation(conv)
    view.verticalScrollBar().setValue(0)
    for _ in range(5):
        view.flush()
        app.processEvents()
    shot = QGuiApplication.primaryScreen().grabWindow(view.winId())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "markdown_table" if args.table else "markdown_answer"
    path = out / f"{name}.png"
    shot.save(str(path))
    print(json.dumps({name: str(path)}))


if __name__ == "__main__":
    main()

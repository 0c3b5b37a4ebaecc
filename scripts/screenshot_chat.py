"""Screenshots of a ~20-message conversation: at the end, mid-scroll, while streaming.

Imports a 20-message SillyTavern chat (written below) through File → Import with the
real server's tokenizer, then sends one more message to the real model and captures the
window as the screen shows it (``QScreen.grabWindow``: under Xvfb the X server's pixels,
not a fresh render).  Run under a real X server to see what a user sees:

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_chat.py [--server-url URL]

Saves chat_first_start, chat_end, chat_mid_scroll, chat_streaming, chat_answered,
chat_scrolled_up_streaming, chat_legend (PNG) in --out; prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

EXCHANGES = [
    ("Hi! I'm planning a trip to Kyoto in April. What should I pack?",
     "April in Kyoto is mild: pack layers, a light rain jacket and comfortable walking shoes.\n\n"
     "Cherry blossoms peak early in the month, so bring a camera and expect crowds at Maruyama Park."),
    ("My cat Tuna will stay with my neighbour Ada. Any tips?",
     "Write down Tuna's feeding times and portions, leave Ada the vet's number, and show her where "
     "the litter supplies are.\n\nA worn T-shirt of yours in Tuna's bed helps a lot with the first nights."),
    ("Write a short Python function that converts Celsius to Fahrenheit.",
     "Here it is:\n\n```python\ndef celsius_to_fahrenheit(celsius: float) -> float:\n"
     "    return celsius * 9 / 5 + 32\n```\n\nFor example, 20 °C gives 68 °F."),
    ("How do I greet people politely in Japanese?",
     "Konnichiwa (hello) works all day; ohayō gozaimasu in the morning and konbanwa in the evening.\n\n"
     "A small bow goes with it; arigatō gozaimasu is a polite thank you."),
    ("What is a good day trip from Kyoto?",
     "Nara is 45 minutes away by train: the deer park, Tōdai-ji and its great Buddha make a full day.\n\n"
     "Uji is closer and famous for green tea and the Byōdō-in temple."),
    ("Can you suggest a budget for food per day?",
     "Plan about 3,000 to 5,000 yen a day: convenience-store breakfasts, a set lunch around 1,000 yen "
     "and a ramen or izakaya dinner."),
    ("What should I know about trains?",
     "Get an ICOCA card for local trains and buses; it also pays at many shops.\n\n"
     "The Japan Rail Pass rarely pays off for a Kyoto-only stay."),
    ("Is it rude to tip?",
     "Yes, tipping is not expected and can confuse staff. Good service is simply part of the price."),
    ("Any tips for visiting temples?",
     "Go early in the morning, take your shoes off where you see a step up, and keep your voice low.\n\n"
     "Photography is banned inside many halls; look for the signs."),
    ("Thanks! Remind me what Ada needs for Tuna?",
     "Ada needs Tuna's feeding times and portions, the vet's number and where the litter supplies are; "
     "your worn T-shirt in the bed helps Tuna settle."),
]
NEXT_MESSAGE = "Please write a detailed packing checklist for the Kyoto trip, with a few lines per item."


def write_chat(path: Path) -> None:
    lines = [json.dumps({"user_name": "Sam", "character_name": "Travel helper",
                         "create_date": "2026-11-23@09h00m00s", "chat_metadata": {}})]
    stamp = time.time() - 3600
    for i, (question, answer) in enumerate(EXCHANGES):
        for is_user, text in ((True, question), (False, answer)):
            lines.append(json.dumps({"name": "Sam" if is_user else "Travel helper", "is_user": is_user,
                                     "send_date": int((stamp + 60 * i) * 1000), "mes": text}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/screenshots"))
    parser.add_argument("--server-url")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--size", default="1360x860", help="window size WxH (a 1280 px screen: 1280x760)")
    args = parser.parse_args()
    from screenshot_driver import open_driver

    driver = open_driver("chat", args.server_url, args.out, args.size, max_new_tokens=args.max_new_tokens,
                         max_context_tokens=0)
    controller, window, wait, shot = driver.controller, driver.window, driver.wait, driver.shot

    driver.connect()
    shot("chat_first_start")
    driver.import_kyoto()
    shot("chat_end", flush=True)
    driver.scroll_to_middle()
    shot("chat_mid_scroll", flush=True)
    window.input.setPlainText(NEXT_MESSAGE)
    window.send()
    wait(lambda: controller.turn.generating and controller.session.answer.streamed >= 40)
    shot("chat_streaming", flush=True)
    bar = window.heatmap.verticalScrollBar()
    bar.triggerAction(bar.SliderAction.SliderPageStepSub)  # the user scrolls up to read
    wait(lambda: controller.session.answer.streamed >= 70 or not controller.gate.busy)
    shot("chat_scrolled_up_streaming", flush=True)
    wait(lambda: not controller.gate.busy)
    window.heatmap.follower.jump_to_latest()
    shot("chat_answered", flush=True)
    window.guide.show_legend()
    wait(lambda: window.guide.legend.isVisible(), 10)
    shot("chat_legend", window.guide.legend)
    figures = {"files": driver.saved, "turns": len(controller.conv.turns),
               "speed": window.stats_bar.speed_label.text(), "window_width": window.frameGeometry().width(),
               "placeholder": window.input.placeholderText(), "listed": window.conversation_list.titles()}
    window.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

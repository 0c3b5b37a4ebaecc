"""How long the bundled model's answers are when nothing cuts them: the max-new-tokens default.

Starts the bundled server (or uses ``--server-url``), sends each prompt below as the
first user message after the default system prompt, with the default sampler settings
and a generous ``--limit``, and records how many tokens each answer had when the model
ended its turn by itself.  Prints, per candidate limit, the share of answers that would
end at the model's own end of turn.

    python scripts/measure_answer_length.py [--seeds 2] [--limit 1024] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from halo_weave.core.chat_template import CHATML, system_text  # noqa: E402
from halo_weave.settings import Settings  # noqa: E402

#: Everyday messages of the kind the issue's trial sent (travel, pets, code, advice, facts).
PROMPTS = [
    "Hi! I'm planning a trip to Kyoto in April. What should I pack?",
    "My cat Tuna will stay with my neighbour Ada while I'm away. Any tips for leaving a cat?",
    "Write a short Python function that converts Celsius to Fahrenheit.",
    "What is a good way to learn Japanese greetings before the trip?",
    "Can you explain what a neural network is to a ten-year-old?",
    "Give me a simple recipe for a vegetable soup.",
    "What are three things to see in Paris?",
    "How do I politely decline an invitation to a party?",
    "Summarise the plot of Romeo and Juliet in a few sentences.",
    "What's the difference between weather and climate?",
    "I feel tired every afternoon. What could help?",
    "Write a haiku about autumn rain.",
    "How does a bicycle stay upright?",
    "Suggest a name for a small bakery by the sea.",
    "What should I do on a rainy weekend at home?",
    "Explain recursion with a short example in Python.",
]

CANDIDATES = (128, 200, 256, 320, 384, 512, 768)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-url")
    parser.add_argument("--seeds", type=int, default=2, help="samples per prompt (sampler seeds 1..N)")
    parser.add_argument("--limit", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from halo_weave.kobold_client import KoboldClient

    server = None
    url = args.server_url
    if url is None:
        from halo_weave.server.launcher import start_server

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        server = start_server(port=0, extra_args=["--no-attention"])
        url = server.wait_ready(timeout=600)
    s = Settings()
    lengths: list[dict] = []
    started = time.time()
    try:
        with KoboldClient(url) as client:
            for prompt in PROMPTS:
                for seed in range(1, args.seeds + 1):
                    text = system_text(s.chat.system_prompt) + CHATML.wrap("user", prompt) + CHATML.prefix.format(role="assistant")
                    sampling = s.sampling
                    stream = client.stream(prompt=text, max_length=args.limit, temperature=sampling.temperature,
                                           top_p=sampling.top_p, top_k=sampling.top_k, rep_pen=sampling.rep_pen,
                                           sampler_seed=seed,
                                           stop_sequence=["<|im_end|>", "<|im_start|>"], output_attentions=False)
                    count = sum(1 for _ in stream)
                    reason = stream.done.finish_reason if stream.done else "?"
                    lengths.append({"prompt": prompt[:40], "seed": seed, "tokens": count, "finish": reason})
                    print(f"{count:5d} {reason:6s} {prompt[:60]}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    ended = sorted(r["tokens"] for r in lengths if r["finish"] == "stop")
    total = len(lengths)
    share = {str(n): round(sum(1 for t in ended if t <= n) / total, 3) for n in CANDIDATES}
    pct = lambda q: ended[min(len(ended) - 1, int(q * len(ended)))] if ended else None  # noqa: E731
    figures = {"answers": total, "ended_by_model": len(ended), "limit": args.limit,
               "median_tokens": pct(0.5), "p80_tokens": pct(0.8), "p90_tokens": pct(0.9),
               "max_tokens": ended[-1] if ended else None,
               "share_ended_within": share, "seconds": round(time.time() - started, 1)}
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

"""What the model answers from each method's context: prompts, greedy answers, LoCoMo's F1.

Scoring follows LoCoMo's evaluation: answers normalised (lower case, punctuation and the
words a/an/the/and removed, commas dropped), Porter-stemmed tokens, token F1; a multi-hop
question (category 1) splits both its gold answer and the prediction on commas and
averages, over the gold parts, the best F1 of any predicted part; an open-domain answer
(category 3) is scored against its gold answer's first ``;`` alternative.  Containment:
every normalised gold token (each part for category 1) appears in the normalised answer.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def normalise(text: str) -> str:
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _tokens(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in normalise(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    pred, truth = _tokens(prediction), _tokens(gold)
    if not pred or not truth:
        return 0.0
    common: dict[str, int] = {}
    for w in truth:
        common[w] = common.get(w, 0) + 1
    same = 0
    for w in pred:
        if common.get(w, 0) > 0:
            common[w] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold: str, category: int) -> float:
    """LoCoMo's answer F1 for one question (see the module docstring)."""
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0]
    if category == 1:
        preds = [p.strip() for p in prediction.split(",")] or [prediction]
        golds = [g.strip() for g in gold.split(",") if g.strip()] or [gold]
        return float(np.mean([max(token_f1(p, g) for p in preds) for g in golds]))
    return token_f1(prediction, gold)


def contains(prediction: str, gold: str, category: int) -> float:
    """1.0 when every gold token (each comma part for multi-hop) is in the answer, else
    the share of the gold parts that are."""
    gold = str(gold)
    if category == 3:
        gold = gold.split(";")[0]
    parts = [g for g in gold.split(",") if g.strip()] if category == 1 else [gold]
    have = set(_tokens(prediction))
    hits = [all(t in have for t in _tokens(p)) and bool(_tokens(p)) for p in parts]
    return float(np.mean(hits)) if hits else 0.0


@dataclass
class Answer:
    text: str
    prompt_tokens: int
    new_tokens: int
    seconds: float
    computed_tokens: int  # prompt tokens the engine had to run (the rest came from its cache)


class Answerer:
    """Greedy answers on the app's llama.cpp engine: a prompt that shares its start with
    the previous one runs only what follows (with ``kv="surgery"`` also moved or kept spans)."""

    def __init__(self, path, threads: int, context_size: int, kv: str = "exact", *,
                 attention: bool = False) -> None:
        """``attention``: the engine can read attention (:meth:`weigh`); without it the
        context reads with flash attention, the engine's fastest settings.  ``kv``: ``"exact"`` (everything after the first change re-run: the prompt's own
        states), ``"surgery"`` (the server's default: spans moved, pruned spans' kept states
        put back where the tokens before them are those they were kept with, other
        inserted spans run in place), ``"surgery-any"`` (kept states put back wherever
        their tokens match), ``"in-order"`` (the default, never the new tail before the
        insertions) or ``"surgery-run"`` (surgery keeping no pruned span's states: an
        inserted span is always run in place, seeing the context before it)."""
        from halo_weave.server import kv_surgery, span_store
        from halo_weave.server.llamacpp.engine import LlamaEngine

        self.engine = LlamaEngine(path, context_size=context_size, threads=threads, read_attention=attention)
        self.name = self.engine.name
        if kv == "exact":
            self.engine.kv.mode = kv_surgery.EXACT
        elif kv == "in-order":
            self.engine.kv.tail_first = False
        elif kv == "surgery":
            self.engine.kv.tail_first = kv_surgery.TAIL_FIRST_DEFAULT
        elif kv == "surgery-any":
            self.engine.kv.store.restore = span_store.ANY_CONTEXT
        elif kv == "surgery-run":
            self.engine.kv.store.max_bytes = 0
        else:
            raise ValueError(f"unknown kv mode {kv!r}")

    @property
    def window(self) -> int:
        """Tokens the engine's context holds."""
        return self.engine.context_size

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        return self.engine.tokenize(text, parse_special=True)

    def answer(self, ids: list[int], max_tokens: int) -> Answer:
        import time

        kv = self.engine.kv
        started = time.perf_counter()
        report = kv.sync([int(i) for i in ids[:-1]])
        computed = getattr(report, "computed", 0) + 1 if report is not None else len(ids)
        logits, _ = kv.step([int(ids[-1])], attention=False)
        out: list[int] = []
        stops = self.engine.stop_ids
        for _ in range(max_tokens):
            token = int(np.argmax(logits))  # the first of equal maxima: deterministic
            if token in stops:
                break
            out.append(token)
            if len(out) == max_tokens:
                break
            logits, _ = kv.step([token], attention=False)
        text = self.engine.detokenize(out)
        return Answer(text.strip(), len(ids), len(out), time.perf_counter() - started, computed)

    def weigh(self, prefix: list[int], queries: list[int]) -> np.ndarray:
        """The attention ``queries``, read after ``prefix``, pay each position of
        ``prefix``: summed over the queries, averaged over layers and heads."""
        kv = self.engine.kv
        kv.sync([int(i) for i in prefix])
        rows = kv.attend_all([int(i) for i in queries])
        return rows[:, :len(prefix)].sum(axis=0)

    def close(self) -> None:
        self.engine.close()

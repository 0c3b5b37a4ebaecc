"""The interface every backend implements, and the one the app programs against.

One class per server kind, all behind :class:`Backend`:

* :class:`halo_weave.kobold_client.KoboldClient`: ours and the patched KoboldCPP fork
  (the attention API, the server's own token ids);
* :class:`halo_weave.backends.koboldcpp.StockKobold` and
  :class:`halo_weave.backends.openai_compat.OpenAICompat`: text mode over the bundled
  tokenizer (:class:`halo_weave.backends.text_mode.TextModeBackend`);
* :class:`halo_weave.backends.llama_server.LlamaServer`: llama.cpp's own API, token ids;
* :class:`halo_weave.backends.chat_completions.ChatCompletions`: ``/v1/chat/completions``,
  text mode with the context sent as messages (the server applies its own template).

Every member is present on every backend: a capability a server lacks reads as such
(``read_ahead = False``, ``save_cache()`` saving nothing, ``models == []``), so callers
never ask whether a member exists.  Qt-free.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from ..events import Capabilities, ModelInfo, TokenEvent


@runtime_checkable
class Backend(Protocol):
    """A connected model server.

    What it is: ``kind`` (``"halo"``, ``"koboldcpp-fork"``, ``"koboldcpp"``,
    ``"llama-server"``, ``"openai"``, ``"openai-chat"``), ``version`` (``None`` when the server does not say),
    ``label`` (what the window calls it), ``capabilities``, ``base_url``.

    Its models: ``models`` (every model it lists, ``[]`` where it serves one),
    ``model_id`` (the one in use, ``None`` where it serves one), ``missing_model`` (the
    model asked for when it is not served).

    Its cache: ``read_ahead`` (takes a draft prompt early: :meth:`prepare`),
    ``restores`` (warms its cache for a reopened conversation: :meth:`restore`),
    ``conversation`` (the key its requests name, for a server that saves a cache per
    conversation), ``saves_cache`` (keeps no cache per conversation itself: the app has
    it save the conversation's after each answer, :meth:`save_cache`).

    ``takes_messages``: the server frames the context itself, from chat messages
    (:meth:`stream` is given ``messages`` beside ``input_ids``).

    The chat template the connection frames with: ``template``, ``template_in_use`` and
    ``template_choice``, set together by :meth:`use_template`.
    """

    kind: str
    version: str | None
    base_url: str
    read_ahead: bool
    restores: bool
    saves_cache: bool
    takes_messages: bool
    conversation: str | None
    models: list[str]
    model_id: str | None
    template: Any
    template_in_use: Any
    template_choice: str | None

    @property
    def label(self) -> str:
        """``"KoboldCPP 1.76"``, ``"llama-server b4567"``: the server in the window's words."""

    @property
    def capabilities(self) -> Capabilities:
        """What the server can do (attention, token ids, exact counts, …)."""

    @property
    def missing_model(self) -> str | None:
        """The model asked for when the server does not serve it (another is used)."""

    def model_info(self) -> ModelInfo:
        """The served model's facts; ``max_context`` in token-table units."""

    def tokenize(self, text: str, add_special_tokens: bool = False, *,
                 parse_special: bool = False) -> list[tuple[int, str]]:
        """``[(token_id, piece)]`` of ``text``; markup stays text unless ``parse_special``."""

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of token ``ids``."""

    def count_tokens(self, text: str) -> tuple[int, bool]:
        """``(tokens, exact)``: the server's own count, else the bundled tokenizer's estimate."""

    def table_context(self, server_context: int) -> int:
        """A context of ``server_context`` server tokens in token-table units."""

    def assume_context(self, server_context: int) -> int:
        """Take the server's context to be ``server_context`` tokens (it does not say);
        returns it in token-table units."""

    def stream(self, *, input_ids: Sequence[int] | None = None, prompt: str | None = None,
               max_length: int = 200, temperature: float = 0.7, top_p: float = 0.9, top_k: int = 40,
               rep_pen: float = 1.1, sampler_seed: int = -1, stop_sequence: Sequence[str] = (),
               request_id: str | None = None, raise_on_abort: bool = False,
               **options: Any) -> Iterable[TokenEvent]:
        """A generation stream of typed token events (``.done`` once it ends); a backend
        that ``takes_messages`` reads ``messages=[{"role", "content"}, …]`` from ``options``."""

    def abort(self, request_id: str | None = None) -> bool:
        """Ask the server to stop the generation ``request_id`` names; whether it said so."""

    def prepare(self, input_ids: Sequence[int], max_length: int = 0, request_id: str | None = None,
                timeout: float = 60.0, queries: Sequence[int] | None = None) -> dict:
        """Have the server read ``input_ids`` ahead (only where ``read_ahead``); with
        ``queries`` (only where ``capabilities.weighs``) its answer's ``attention`` is
        what they pay each position of ``input_ids``."""

    def restore(self, input_ids: Sequence[int], max_length: int = 0, conversation: str | None = None,
                request_id: str | None = None) -> dict:
        """Warm the server's cache for a reopened ``conversation`` (only where ``restores``)."""

    def save_cache(self) -> int:
        """Save the open conversation's cache where the server keeps none itself; the
        tokens saved (0 where it saves nothing)."""

    def use_template(self, used: Any, choice: str | None) -> None:
        """Frame with ``used`` (a :class:`~halo_weave.backends.model_template.TemplateInUse`),
        resolved from the conversation's ``choice``."""

    def close(self) -> None:
        """Close the connection."""


#: Every member :class:`Backend` declares (the conformance test checks each backend class).
MEMBERS = tuple(sorted(
    {name for name in Backend.__annotations__}
    | {name for name, value in vars(Backend).items()
       if not name.startswith("_") and (callable(value) or isinstance(value, property))}))

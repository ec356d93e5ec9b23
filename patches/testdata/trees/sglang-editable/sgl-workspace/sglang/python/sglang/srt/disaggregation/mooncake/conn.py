"""Fixture standing in for sglang/srt/disaggregation/mooncake/conn.py in infera-exec
engine-patch tests. Only the anchored lines and the typing import line (as at v0.5.15.post1,
where the v0.2.2 script anchors too) are upstream text; the rest is invented.
"""

import enum
from typing import List, Optional, Tuple, Union
from typing import Any, Dict  # the fixture's own

from sglang.srt.disaggregation.common.utils import (
    FastQueue,
    TraceNullContext,
    TraceReqContext,
    TransferKVChunk,
)


class DisaggregationMode(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


class MooncakeKVManager:
    def __init__(self, num_queues: int = 2) -> None:
        self.disaggregation_mode = DisaggregationMode.PREFILL
        self.transfer_queues: List[FastQueue] = [FastQueue() for _ in range(num_queues)]
        self.transfer_infos: Dict[int, Dict[str, Any]] = {}
        self.sent: List[TransferKVChunk] = []

    def transfer_worker(self, queue: FastQueue) -> None:
        while True:
            try:
                kv_chunk: TransferKVChunk = queue.get()
                if kv_chunk.room < 0:
                    return
                reqs_to_be_processed = (
                    self.transfer_infos[kv_chunk.room].values()
                    if kv_chunk.room in self.transfer_infos
                    else []
                )
                for _dst in reqs_to_be_processed:
                    self.sent.append(kv_chunk)
            except Exception:  # the fixture never lets a worker die
                continue

    def add_transfer_request(
        self,
        bootstrap_room: int,
        kv_indices: List[int],
        is_last_chunk: bool,
        aux_index: Optional[int] = None,
        num_kv_tokens: Optional[int] = None,
        trace_ctx: Optional[Union[TraceReqContext, TraceNullContext]] = None,
    ):
        assert self.disaggregation_mode == DisaggregationMode.PREFILL
        if trace_ctx is None:
            trace_ctx = TraceNullContext()
        shard = bootstrap_room % len(self.transfer_queues)
        self.transfer_queues[shard].put(
            TransferKVChunk(
                room=bootstrap_room,
                prefill_kv_indices=kv_indices,
                is_last_chunk=is_last_chunk,
                prefill_aux_index=aux_index,
                num_kv_tokens=num_kv_tokens,
                trace_ctx=trace_ctx,
            )
        )


class MooncakeKVSender:
    def __init__(self, mgr: MooncakeKVManager, room: int, total_pages: int) -> None:
        self.kv_mgr = mgr
        self.bootstrap_room = room
        self.total_pages = total_pages
        self.sent_pages = 0
        self.aux_index = 0
        self.trace_ctx = TraceNullContext()

    def send(self, kv_indices: List[int], num_kv_tokens: Optional[int] = None):
        should_skip = len(kv_indices) == 0
        self.sent_pages += len(kv_indices)
        is_last_chunk = self.sent_pages >= self.total_pages
        if should_skip:
            return

        if not is_last_chunk:
            self.kv_mgr.add_transfer_request(
                self.bootstrap_room,
                kv_indices,
                False,
                num_kv_tokens=num_kv_tokens,
                trace_ctx=self.trace_ctx.copy_for_thread(),
            )
        else:
            self.kv_mgr.add_transfer_request(
                self.bootstrap_room,
                kv_indices,
                True,
                aux_index=self.aux_index,
                num_kv_tokens=num_kv_tokens,
                trace_ctx=self.trace_ctx.copy_for_thread(),
            )

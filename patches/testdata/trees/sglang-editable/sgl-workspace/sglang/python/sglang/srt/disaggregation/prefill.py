"""Fixture standing in for sglang/srt/disaggregation/prefill.py in infera-exec
engine-patch tests. Only the anchored block is upstream text; the rest is invented.
"""

from typing import Any, List

import torch


class SchedulerDisaggregationPrefillMixin:
    enable_overlap: bool = True
    forward_stream: Any = None

    def process_batch_result_disagg_prefill(self, batch: Any) -> None:
        reqs: List[Any] = list(batch.reqs)
        for req in reqs:
            if req.inflight_middle_chunks <= 0:
                self.send_kv_chunk(req, last_chunk=True)
            else:
                req.inflight_middle_chunks -= 1
                if self.enable_overlap and not req.pending_bootstrap:
                    assert (
                        req.metadata_buffer_index >= 0
                    ), f"Req {req.rid} does not have metadata buffer allocated"
                    self.send_kv_chunk(req, last_chunk=False, end_idx=req.tmp_end_idx)

    def send_kv_chunk(self, req: Any, last_chunk: bool = False, end_idx: Any = None) -> None:
        end = len(req.origin_input_ids) if end_idx is None else end_idx
        pages = list(range(req.start_send_idx, end))
        req.disagg_kv_sender.send(pages, num_kv_tokens=len(pages))
        req.start_send_idx = end

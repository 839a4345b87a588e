"""SC105 on handles a helper launches and returns in a list, left unwaited by the caller that binds the list
(rules/returned_handles.py), reduced from vLLM 0.33.0's GroupCoordinator.send_tensor_dict / isend_tensor_dict
(parallel_state.py:1077-1125, 1165-1240). Exact outcomes: (rule, path, line, kind) and the message."""

from __future__ import annotations

import textwrap

from static_helpers import findings_of, line_of, summary_of

COORDINATOR = """
import torch


def _split_tensor_dict(tensor_dict):
    metadata_list, tensor_list = [], []
    for key, value in tensor_dict.items():
        if isinstance(value, torch.Tensor):
            metadata_list.append((key, value.size()))
            tensor_list.append(value)
    return metadata_list, tensor_list


class GroupCoordinator:
    def send_tensor_dict(self, tensor_dict, dst=None):
        handles = self.isend_tensor_dict(
            tensor_dict,
            dst=dst,
        )
        for handle in handles:
            WAIT
        return None

    def isend_tensor_dict(self, tensor_dict, dst=None):
        metadata_list, tensor_list = _split_tensor_dict(tensor_dict)
        handles = [self.isend_object(metadata_list, dst=dst)]
        for tensor in tensor_list:
            handle = torch.distributed.isend(tensor, dst=self.ranks[dst], group=self.device_group)
            tensor.record_stream(torch.cuda.current_stream(tensor.device))
            handles.append(handle)
        return handles
"""


def _variant(wait: str) -> str:
    return textwrap.dedent(COORDINATOR).replace("WAIT", wait)


def test_a_callers_list_of_returned_send_handles_left_unwaited_at_its_end():
    racy = _variant("pass")
    findings = findings_of({"parallel_state.py": racy}, {"SC105"})
    assert summary_of(findings) == [
        ("SC105", "parallel_state.py", line_of(racy, "handles = self.isend_tensor_dict("), "WAR")]
    assert findings[0].message == (
        f"GroupCoordinator.send_tensor_dict returns while the async `isend` (line "
        f"{line_of(racy, 'handles = self.isend_tensor_dict(')}) still reads `tensor_dict`, which its caller holds: "
        "`handles` is neither waited nor handed on, so nothing orders the caller's next overwrite after it")
    assert findings[0].related[0].line == line_of(racy, "return None")


def test_the_same_caller_waiting_each_handle_is_clean():
    assert findings_of({"parallel_state.py": _variant("handle.wait()")}, {"SC105"}) == []


def test_a_caller_that_hands_the_list_on_is_not_asked():
    # Not iterated or waited: a fire-and-forget caller that keeps the handles (vLLM's gpu_worker.py) or returns them.
    kept = _variant("pass").replace("        for handle in handles:\n            pass\n",
                                    "        self._pp_send_work = handles[1:]\n")
    assert findings_of({"parallel_state.py": kept}, {"SC105"}) == []
    returned = _variant("pass").replace("        for handle in handles:\n            pass\n        return None\n",
                                        "        return handles\n")
    assert findings_of({"parallel_state.py": returned}, {"SC105"}) == []


def test_a_returned_handle_of_a_tensor_the_callee_made_itself_is_not_the_callers():
    own = _variant("pass").replace("        for tensor in tensor_list:\n",
                                   "        for tensor in [torch.empty(4, device=\"cuda\")]:\n")
    assert findings_of({"parallel_state.py": own}, {"SC105"}) == []

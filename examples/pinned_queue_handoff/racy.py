"""Scenario 30, racy: a loader thread pins a batch and hands it to the main thread through a plain attribute; the
main thread's non_blocking H2D copy reads the pinned buffer with nothing ordering it after the pinning.

`fixed.py` hands the batch over through a `queue.Queue`, as the DataLoader's pin-memory thread does: put -> get
orders the two threads."""

import threading
import time

import torch


def main() -> None:
    holder: dict = {}
    done = threading.Event()

    def loader() -> None:
        holder["batch"] = torch.full((1 << 20,), 3.0).pin_memory()  # streamcheck: earlier
        done.wait(30)

    thread = threading.Thread(target=loader)
    thread.start()
    while "batch" not in holder:
        time.sleep(0.001)
    on_device = holder["batch"].to("cuda", non_blocking=True)  # streamcheck: race (not ordered after the pinning)
    done.set()
    thread.join()
    torch.cuda.synchronize()
    print(on_device.sum().item())


if __name__ == "__main__":
    main()

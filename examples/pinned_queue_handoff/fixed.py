"""Scenario 30, fixed: the loader thread hands the pinned batch over through a `queue.Queue` (as the DataLoader's
pin-memory thread does); put -> get orders the pinning before the main thread's H2D copy."""

import queue
import threading

import torch


def main() -> None:
    handoff: queue.Queue = queue.Queue()
    done = threading.Event()

    def loader() -> None:
        handoff.put(torch.full((1 << 20,), 3.0).pin_memory())
        done.wait(30)

    thread = threading.Thread(target=loader)
    thread.start()
    on_device = handoff.get().to("cuda", non_blocking=True)
    done.set()
    thread.join()
    torch.cuda.synchronize()
    print(on_device.sum().item())


if __name__ == "__main__":
    main()

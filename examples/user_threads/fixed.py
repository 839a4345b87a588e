"""Scenario 24, fixed: thread B makes its stream wait for thread A's stream before writing."""

import threading

import torch


def main() -> None:
    t1 = torch.zeros(1 << 20, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())

    def writer_a() -> None:
        with torch.cuda.stream(s1):
            t1.fill_(1.0)

    def writer_b() -> None:
        s2.wait_stream(s1)
        with torch.cuda.stream(s2):
            t1.fill_(2.0)

    a = threading.Thread(target=writer_a)
    a.start()
    a.join()
    b = threading.Thread(target=writer_b)
    b.start()
    b.join()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

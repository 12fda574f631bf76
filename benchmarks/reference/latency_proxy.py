"""A TCP proxy that adds a fixed round-trip latency: what a wide-area link does to a read.

Every chunk of bytes, either way, is delivered half the round trip after it arrived, in order;
bandwidth is not limited. `ip netns` + `tc netem` do the same in the kernel where netem exists
(this machine's kernel has no netem qdisc).

Usage: latency_proxy.py RTT_MS LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]
(all on 127.0.0.1); runs until killed.
"""

import asyncio
import sys
import time


async def pipe(reader, writer, delay):
    """Copies `reader` to `writer`, each chunk `delay` seconds after it came."""
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(1 << 20)
            if not data:
                break
            queue.put_nowait((time.monotonic() + delay, data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait((0.0, None))
    await sender


def handler(target, delay):
    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, delay),
            pipe(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    return handle


async def main():
    delay = float(sys.argv[1]) / 2000.0  # one way, seconds
    servers = []
    for pair in sys.argv[2:]:
        listen, target = (int(p) for p in pair.split(":"))
        servers.append(await asyncio.start_server(handler(target, delay), "127.0.0.1", listen))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())

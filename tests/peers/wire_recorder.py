"""Record the JSON-RPC messages an MCP Python SDK client exchanges, as sent.

Used by mcp_python_client.py (mcp 2.x) and mcp_python_old_client.py (mcp
1.9): both SDKs hand their session a pair of streams carrying
`SessionMessage` objects (`.message` is the parsed JSON-RPC envelope, whose
`result` is still the raw JSON object the server sent). `Recorder.wrap`
returns the same pair with every message also written down, so the report
can show the Rust test what went over the wire, not only what the SDK made
of it. Nothing is changed or delayed.
"""


def _envelope(item):
    """The JSON object of a SessionMessage (or None for anything else)."""
    message = getattr(item, "message", None)
    if message is None:
        return None
    message = getattr(message, "root", message)  # mcp 1.9: a RootModel
    try:
        return message.model_dump(mode="json", by_alias=True, exclude_unset=True)
    except Exception:  # not a pydantic model: nothing to record
        return None


class Recorder:
    """The exchanges of one session: each request with its response."""

    def __init__(self):
        self.exchanges = []
        self._by_id = {}

    def outbound(self, item):
        envelope = _envelope(item)
        if envelope is None or "method" not in envelope:
            return
        exchange = {"method": envelope["method"], "params": envelope.get("params")}
        if "id" in envelope:
            exchange["id"] = envelope["id"]
            self._by_id[repr(envelope["id"])] = exchange
        else:
            exchange["notification"] = True
        self.exchanges.append(exchange)

    def inbound(self, item):
        envelope = _envelope(item)
        if envelope is None or "method" in envelope:
            return
        exchange = self._by_id.get(repr(envelope.get("id")))
        if exchange is None:
            self.exchanges.append({"method": None, "unmatched_response": envelope})
            return
        if "error" in envelope:
            exchange["error"] = envelope["error"]
        else:
            exchange["result"] = envelope.get("result")

    def wrap(self, read_stream, write_stream):
        return _Read(read_stream, self), _Write(write_stream, self)


class _Read:
    def __init__(self, inner, recorder):
        self._inner = inner
        self._recorder = recorder

    async def receive(self):
        item = await self._inner.receive()
        self._recorder.inbound(item)
        return item

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self._inner.__anext__()
        self._recorder.inbound(item)
        return item

    async def aclose(self):
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Write:
    def __init__(self, inner, recorder):
        self._inner = inner
        self._recorder = recorder

    async def send(self, item):
        self._recorder.outbound(item)
        await self._inner.send(item)

    async def aclose(self):
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)

"""`laneway serve`: the HTTP API, the live event stream and the board page (see HTTP.md).

`app` builds the ASGI application, `routes` holds the API (each route one service call),
`stream` the event pump and Server-Sent Events, `server` runs it under uvicorn.
"""

//! Writing replies the proxy builds itself, in the client's protocol version.

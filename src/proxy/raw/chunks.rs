//! A chunked response body relayed as it arrives: each chunk's data passes
//! through unchanged under a size line the proxy writes itself (extensions
//! dropped), and the trailer section is read to its end and dropped, so the
//! client gets a plain `0\r\n\r\n`. What the upstream sends after the end
//! is not part of the body; the caller then does not reuse the connection.

use super::head::BadResponse;

/// The longest chunk size line, and the most trailer bytes, read.
const MAX_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a chunk size line.
    Size,
    /// Inside a chunk's data, with this many bytes to come.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    Done,
}

/// Where a chunked body stands.
#[derive(Debug)]
pub(super) struct Chunks {
    state: State,
    trailer_bytes: usize,
}

impl Chunks {
    pub(super) fn new() -> Chunks {
        Chunks {
            state: State::Size,
            trailer_bytes: 0,
        }
    }

    /// Whether the last chunk and the trailers have been read.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads what it can of `input`, appending the body as the client
    /// gets it to `out`; returns how many bytes of `input` it took (the
    /// rest waits for more bytes, or follows the body).
    pub(super) fn relay(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, BadResponse> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Done => return Ok(pos),
                State::Size => match size_line(rest)? {
                    Some((n, size)) => {
                        pos += n;
                        if size == 0 {
                            self.state = State::Trailers;
                        } else {
                            out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
                            self.state = State::Data(size);
                        }
                    }
                    None => return Ok(pos),
                },
                State::Data(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => match rest {
                    [b'\r', b'\n', ..] => {
                        out.extend_from_slice(b"\r\n");
                        pos += 2;
                        self.state = State::Size;
                    }
                    [] | [b'\r'] => return Ok(pos),
                    _ => return Err(BadResponse("chunk longer than its size")),
                },
                State::Trailers => {
                    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                        if self.trailer_bytes + rest.len() > MAX_TRAILERS {
                            return Err(BadResponse("trailers too large"));
                        }
                        return Ok(pos);
                    };
                    let line = &rest[..end];
                    pos += end + 1;
                    if line.is_empty() || line == b"\r" {
                        out.extend_from_slice(b"0\r\n\r\n");
                        self.state = State::Done;
                    } else {
                        self.trailer_bytes += end + 1;
                        if self.trailer_bytes > MAX_TRAILERS {
                            return Err(BadResponse("trailers too large"));
                        }
                    }
                }
            }
        }
    }
}

/// A chunk size line at the start of `rest`, read as strictly as hyper's
/// decoder reads one: one to sixteen hex digits, optional spaces or tabs,
/// an optional extension without CR or LF, then CRLF. `None` until the
/// line is whole; its length and the size once it is.
fn size_line(rest: &[u8]) -> Result<Option<(usize, u64)>, BadResponse> {
    const BAD: BadResponse = BadResponse("malformed chunk size");
    let Some(lf) = rest.iter().take(MAX_LINE + 1).position(|&b| b == b'\n') else {
        return if rest.len() > MAX_LINE {
            Err(BAD)
        } else {
            Ok(None)
        };
    };
    let line = rest[..lf].strip_suffix(b"\r").ok_or(BAD)?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(BAD);
    }
    let blank = line[digits..]
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let after = &line[digits + blank..];
    if !(after.is_empty() || after.starts_with(b";")) || after.contains(&b'\r') {
        return Err(BAD);
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| BAD)?;
    let size = u64::from_str_radix(hex, 16).map_err(|_| BAD)?;
    Ok(Some((lf + 1, size)))
}

/// One piece of a body that ends when the upstream closes, as a chunk.
pub(super) fn frame(data: &[u8], out: &mut Vec<u8>) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes, as reads would bring it.
    fn relay_in_steps(input: &[u8], step: usize) -> (Vec<u8>, bool, usize) {
        let mut c = Chunks::new();
        let (mut out, mut buf, mut fed) = (Vec::new(), Vec::new(), 0);
        while fed < input.len() && !c.done() {
            let end = (fed + step).min(input.len());
            buf.extend_from_slice(&input[fed..end]);
            fed = end;
            let took = c.relay(&buf, &mut out).unwrap();
            buf.drain(..took);
        }
        (out, c.done(), buf.len() + input.len() - fed)
    }

    #[test]
    fn chunks_pass_with_their_extensions_and_trailers_dropped_in_any_split() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64] {
            let (out, done, after) = relay_in_steps(body, step);
            assert_eq!(
                out, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                "step {step}"
            );
            assert!(done);
            assert_eq!(after, 4, "what follows the body is left: step {step}");
        }
    }

    #[test]
    fn malformed_chunks_are_refused() {
        let bad_inputs: [&[u8]; 9] = [
            b"zz\r\nhello\r\n",
            b"3\r\nhello\r\n0\r\n\r\n",
            // No digits: not a last chunk.
            b"\r\nREST",
            b";x\r\nREST",
            b" \r\nREST",
            // A bare LF, in an extension or ending the line.
            b"5;a\nb\r\nhello\r\n",
            b"5\nhello\r\n",
            b"12345678901234567\r\n",
            b"5 \r;x\r\nhello\r\n",
        ];
        for bad in bad_inputs {
            let mut c = Chunks::new();
            assert!(c.relay(bad, &mut Vec::new()).is_err(), "{bad:?}");
        }
        let mut c = Chunks::new();
        let long = vec![b'1'; MAX_LINE + 1];
        assert!(c.relay(&long, &mut Vec::new()).is_err());
    }

    #[test]
    fn a_body_until_close_is_framed_as_chunks() {
        let mut out = Vec::new();
        frame(b"abc", &mut out);
        frame(b"", &mut out);
        assert_eq!(out, b"3\r\nabc\r\n");
    }
}

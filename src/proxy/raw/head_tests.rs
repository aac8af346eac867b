use super::*;

fn conn() -> ConnInfo {
    ConnInfo {
        peer: "10.0.0.7:5000".parse().unwrap(),
        local: "127.0.0.1:8080".parse().unwrap(),
        tls: false,
    }
}

fn target() -> Target {
    Target {
        base: String::new(),
        host: "up:9000".into(),
    }
}

/// The plan for `head`, or `None` when the raw path leaves it to hyper.
fn plan_of(head: &str) -> Option<Plan> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    assert!(req.parse(head.as_bytes()).unwrap().is_complete(), "{head}");
    let s = screen(&req)?;
    Some(plan(&req, &s, &target(), &Client::of(conn())))
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn the_head_sent_upstream_is_the_clients_with_the_proxys_fields() {
    let p = plan_of(
        "POST /a/b?x=1 HTTP/1.1\r\nHost: shop.example\r\nX-Custom: Keep  Me\r\n\
         Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n\
         X-Verdict-Decision: allow\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\n\
         X-Forwarded-Host: evil\r\nX-Request-ID: rid-1\r\nContent-Length: 3\r\n\r\n",
    )
    .unwrap();
    assert_eq!(
        text(&p.head),
        "POST /a/b?x=1 HTTP/1.1\r\nhost: up:9000\r\nX-Custom: Keep  Me\r\n\
         x-forwarded-for: 1.2.3.4, 10.0.0.7\r\nx-forwarded-proto: http\r\n\
         x-forwarded-host: shop.example\r\nx-request-id: rid-1\r\ncontent-length: 3\r\n\r\n"
    );
    assert_eq!(p.body_len, 3);
    assert!(!p.close && !p.head_only && !p.idempotent);
    assert_eq!(p.request_id, "rid-1");
}

#[test]
fn bare_lf_heads_go_upstream_with_crlf_and_a_fresh_request_id() {
    let p =
        plan_of("GET / HTTP/1.1\nhost: x\nx-request-id: has space\nconnection: close\n\n").unwrap();
    let head = text(&p.head);
    assert!(!head.replace("\r\n", "").contains('\n'), "{head}");
    assert!(p.close && p.idempotent);
    assert_ne!(p.request_id, "has space");
    assert!(head.contains(&format!("x-request-id: {}\r\n", p.request_id)));
    assert!(!head.to_ascii_lowercase().contains("connection"), "{head}");
}

#[test]
fn the_upstreams_base_path_goes_first() {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    req.parse(b"GET /x?y HTTP/1.1\r\nhost: h\r\n\r\n").unwrap();
    let s = screen(&req).unwrap();
    let t = Target {
        base: "/base".into(),
        host: "up".into(),
    };
    assert!(text(&plan(&req, &s, &t, &Client::of(conn())).head)
        .starts_with("GET /base/x?y HTTP/1.1\r\nhost: up\r\n"));
}

#[test]
fn anything_beyond_one_pass_is_left_to_hyper() {
    let left = [
        "GET / HTTP/1.0\r\nhost: x\r\n\r\n",
        "GET http://x/ HTTP/1.1\r\nhost: x\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nhost: x\r\n\r\n",
        "CONNECT x:443 HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /a#frag HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /a<b HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: x\r\nhost: y\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: +3\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 3\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: x\r\nconnection: x-secret\r\n\r\n",
        "POST / HTTP/1.1\r\nhost: x\r\nX-HTTP-Method-Override: DELETE\r\n\r\n",
        "GET / HTTP/1.1\r\nhost: x\r\nx-original-url: /admin\r\n\r\n",
    ];
    for head in left {
        assert!(plan_of(head).is_none(), "{head}");
    }
}

fn answer_of(head: &str, plan: &Plan) -> Result<Answer, BadResponse> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    assert!(resp.parse(head.as_bytes()).unwrap().is_complete(), "{head}");
    answer(&resp, plan, || "Mon, 30 Nov 2026 00:00:00 GMT".into())
}

fn get() -> Plan {
    plan_of("GET / HTTP/1.1\r\nhost: x\r\nx-request-id: r\r\n\r\n").unwrap()
}

#[test]
fn the_clients_head_is_the_upstreams_with_the_proxys_framing() {
    let a = answer_of(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive, x-hop\r\n\
         X-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-Request-ID: theirs\r\nContent-Length: 2\r\n\r\n",
        &get(),
    )
    .unwrap();
    assert_eq!(
        text(&a.head),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\ncontent-length: 2\r\n\
         x-request-id: r\r\ndate: Mon, 30 Nov 2026 00:00:00 GMT\r\n\r\n"
    );
    assert_eq!(
        (a.status, a.framing, a.reusable),
        (200, Framing::Length(2), true)
    );
}

#[test]
fn each_framing_is_read_as_hyper_reads_it() {
    let cases = [
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            Framing::Chunked,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
            Framing::Chunked,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            Framing::UntilClose,
            false,
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", Framing::UntilClose, false),
        ("HTTP/1.1 204 No Content\r\n\r\n", Framing::Empty, true),
        (
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
            Framing::Empty,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\n",
            Framing::Length(4),
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 4\r\n\r\n",
            Framing::Length(4),
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 4\r\nconnection: keep-alive\r\n\r\n",
            Framing::Length(4),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 4\r\n\r\n",
            Framing::Length(4),
            true,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 4\r\nconnection: close, keep-alive\r\n\r\n",
            Framing::Length(4),
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: keep-alive, close\r\n\r\n",
            Framing::Length(4),
            false,
        ),
    ];
    for (head, framing, reusable) in cases {
        let a = answer_of(head, &get()).unwrap();
        assert_eq!((a.framing, a.reusable), (framing, reusable), "{head}");
    }
    // A bodiless answer keeps the length a GET would have had.
    let a = answer_of(
        "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
        &get(),
    )
    .unwrap();
    assert!(text(&a.head).contains("content-length: 9\r\n"));
    let head_req = plan_of("HEAD / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let a = answer_of("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", &head_req).unwrap();
    assert_eq!(a.framing, Framing::Empty);
    for bad in [
        "HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
    ] {
        assert!(answer_of(bad, &get()).is_err(), "{bad}");
    }
}

#[test]
fn a_client_that_asked_to_close_is_told_so() {
    let p = plan_of("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").unwrap();
    let a = answer_of(
        "HTTP/1.1 200 OK\r\ndate: d\r\ncontent-length: 0\r\n\r\n",
        &p,
    )
    .unwrap();
    let head = text(&a.head);
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(
        head.contains("date: d\r\n") && !head.contains("GMT"),
        "{head}"
    );
}

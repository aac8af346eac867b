//! The fence every outbound POST of verdict's own goes through (review
//! notifications, shipped decision logs): an HTTP client that resolves a
//! hostname itself and refuses it when any of its addresses is link-local
//! or a cloud metadata endpoint, so the checked addresses are the ones
//! connected to. An IP literal in the URL is not resolved, and so not
//! refused: the operator named that address. Redirects are never followed
//! (the legacy client does not follow them). Evidence fetches apply the same
//! address rule ([`is_forbidden_ip`]) with their own allowlist.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// Link-local (`169.254.0.0/16`, `fe80::/10`) and the cloud metadata
/// endpoints (`169.254.169.254`, AWS `fd00:ec2::254`, Alibaba
/// `100.100.100.200`), also as IPv4-mapped IPv6.
pub fn is_forbidden_ip(ip: IpAddr) -> bool {
    const ALIBABA: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);
    const AWS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4 == ALIBABA,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_forbidden_ip(IpAddr::V4(v4)),
            None => (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == AWS_V6,
        },
    }
}

/// A client for http and https URLs (rustls with `tls`, HTTP/1.1) whose
/// hostnames resolve through [`Fenced`].
pub type FencedClient<B> = Client<HttpsConnector<HttpConnector<Fenced>>, B>;

/// Builds a [`FencedClient`] that gives up connecting after `timeout`.
pub fn client<B>(timeout: Duration, tls: rustls::ClientConfig) -> FencedClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = HttpConnector::new_with_resolver(Fenced);
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let connector = builder.https_or_http().enable_http1().wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// Resolves a hostname and refuses it when any address is forbidden.
#[derive(Clone, Copy, Debug)]
pub struct Fenced;

impl tower_service::Service<Name> for Fenced {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(a) = addrs.iter().find(|a| is_forbidden_ip(a.ip())) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{host} resolves to {}, a link-local or metadata address",
                        a.ip()
                    ),
                ));
            }
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostname that resolves to a metadata address is refused before
    /// any connection is made.
    #[tokio::test]
    async fn hostnames_resolving_to_metadata_addresses_are_refused() {
        use tower_service::Service;
        // 169.254.169.254 written as one number: a name to the resolver.
        let name: Name = "2852039166".parse().unwrap();
        let err = Fenced.call(name).await.unwrap_err();
        assert!(err.to_string().contains("link-local or metadata"), "{err}");
        let ok: Name = "localhost".parse().unwrap();
        assert!(Fenced.call(ok).await.is_ok());
    }
}

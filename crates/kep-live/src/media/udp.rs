//! The media address: one UDP socket for every session. Its reader routes each datagram to
//! the task of the room whose session it belongs to: a STUN binding request by the ICE
//! user fragment it names (`USERNAME` is `<kep's ufrag>:<the peer's>`, kep chose it for the
//! session), and any other datagram by its sender's address, which the sender's last such
//! request tied to its session. (An address can thus move to a new session at once, as one
//! does when a peer's port is reused while kep still holds the old session.)

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use str0m::ice::StunMessage;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::room::Command;

/// A change to where datagrams go.
pub(super) enum Route {
    /// The session with this ufrag lives in that room's task.
    Add(Arc<str>, mpsc::UnboundedSender<Command>),
    /// The session ended: its datagrams go nowhere.
    Forget(Arc<str>),
}

/// Largest datagram read: above any MTU a WebRTC peer uses.
const MAX_DATAGRAM: usize = 2048;

pub(super) async fn read(
    socket: Arc<UdpSocket>,
    mut routes: mpsc::UnboundedReceiver<Route>,
    shutdown: CancellationToken,
) {
    let mut by_ufrag: HashMap<Arc<str>, mpsc::UnboundedSender<Command>> = HashMap::new();
    // The sender's address, once its STUN request named a session: (ufrag, room).
    let mut by_addr: HashMap<SocketAddr, Arc<str>> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        tokio::select! {
            // A route changed before a datagram is read applies to it.
            biased;
            route = routes.recv() => match route {
                Some(Route::Add(ufrag, room)) => { by_ufrag.insert(ufrag, room); }
                Some(Route::Forget(ufrag)) => {
                    by_ufrag.remove(&ufrag);
                    by_addr.retain(|_, u| *u != ufrag);
                }
                None => return,
            },
            received = socket.recv_from(&mut buf) => {
                let (n, source) = match received {
                    Ok(got) => got,
                    // An ICMP error for an earlier send (a peer gone): nothing to read.
                    Err(_) => continue,
                };
                let data = &buf[..n];
                let ufrag = match session_of(data, &by_ufrag) {
                    Some(named) => {
                        if by_addr.get(&source) != Some(&named) {
                            by_addr.insert(source, named.clone());
                        }
                        named
                    }
                    None => match by_addr.get(&source) {
                        Some(ufrag) => ufrag.clone(),
                        None => continue,
                    },
                };
                let Some(room) = by_ufrag.get(&ufrag) else { continue };
                let _ = room.send(Command::Datagram { ufrag, source, at: Instant::now(), data: data.to_vec() });
            }
            () = shutdown.cancelled() => return,
        }
    }
}

/// The ufrag of a known session that a STUN binding request is for: none for any other
/// datagram, or a request for no session.
fn session_of(
    data: &[u8],
    sessions: &HashMap<Arc<str>, mpsc::UnboundedSender<Command>>,
) -> Option<Arc<str>> {
    // RFC 7983: a STUN message starts with 0–3; DTLS and RTP, most datagrams, do not.
    if data.first().is_none_or(|&b| b > 3) {
        return None;
    }
    let stun = StunMessage::parse(data).ok()?;
    if !stun.is_binding_request() {
        return None;
    }
    let (ours, _) = stun.split_username()?;
    sessions.get_key_value(ours).map(|(k, _)| k.clone())
}

#[cfg(test)]
mod tests {
    use str0m::ice::TransId;

    use super::*;

    fn binding_request(username: &str) -> Vec<u8> {
        let request = StunMessage::binding_request(username, TransId::new(), true, 1, 1, false);
        let mut buf = vec![0; MAX_DATAGRAM];
        // The router reads the USERNAME only; the room's session checks the integrity.
        let n = request
            .to_bytes(Some(b"pw"), &mut buf, |_, _| [0; 20])
            .unwrap();
        buf.truncate(n);
        buf
    }

    async fn next(rx: &mut mpsc::UnboundedReceiver<Command>) -> (Arc<str>, Vec<u8>) {
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await;
        match got.expect("a datagram routed").unwrap() {
            Command::Datagram { ufrag, data, .. } => (ufrag, data),
            _ => unreachable!(),
        }
    }

    /// A peer whose address a live session holds starts another session from it (its port
    /// reused): its requests and what follows go to the new session at once.
    #[tokio::test]
    async fn an_address_follows_the_session_its_last_binding_request_named() {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = socket.local_addr().unwrap();
        let (routes, routed) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        tokio::spawn(read(socket, routed, shutdown.clone()));
        let (room_a, mut a) = mpsc::unbounded_channel();
        let (room_b, mut b) = mpsc::unbounded_channel();
        routes.send(Route::Add("a".into(), room_a)).unwrap();
        routes.send(Route::Add("b".into(), room_b)).unwrap();
        let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let media = [0x80, 96, 0, 1];

        // Nothing is routed from an address before a request names a session; garbage and
        // a request for no session are dropped.
        for datagram in [&media[..], &[0, 1, 2], &binding_request("zz:peer")] {
            peer.send_to(datagram, addr).await.unwrap();
        }
        peer.send_to(&binding_request("a:peer"), addr)
            .await
            .unwrap();
        peer.send_to(&media, addr).await.unwrap();
        assert_eq!(next(&mut a).await.0.as_ref(), "a");
        assert_eq!(next(&mut a).await.1, media);

        peer.send_to(&binding_request("b:peer"), addr)
            .await
            .unwrap();
        peer.send_to(&media, addr).await.unwrap();
        assert_eq!(next(&mut b).await.0.as_ref(), "b");
        assert_eq!(next(&mut b).await, ("b".into(), media.to_vec()));
        assert!(a.try_recv().is_err(), "the old session gets nothing more");
        shutdown.cancel();
    }
}

//! The media address: one UDP socket for every session. Its reader routes each datagram to
//! the task of the room whose session it belongs to: by the sender's address once known,
//! and before that by the ICE user fragment of the sender's first STUN binding request
//! (`USERNAME` is `<kep's ufrag>:<the peer's>`), which kep chose for the session.

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
            received = socket.recv_from(&mut buf) => {
                let (n, source) = match received {
                    Ok(got) => got,
                    // An ICMP error for an earlier send (a peer gone): nothing to read.
                    Err(_) => continue,
                };
                let data = &buf[..n];
                let ufrag = match by_addr.get(&source) {
                    Some(ufrag) => ufrag.clone(),
                    None => {
                        let Some(ufrag) = session_of(data, &by_ufrag) else { continue };
                        by_addr.insert(source, ufrag.clone());
                        ufrag
                    }
                };
                let Some(room) = by_ufrag.get(&ufrag) else { continue };
                let _ = room.send(Command::Datagram { ufrag, source, at: Instant::now(), data: data.to_vec() });
            }
            route = routes.recv() => match route {
                Some(Route::Add(ufrag, room)) => { by_ufrag.insert(ufrag, room); }
                Some(Route::Forget(ufrag)) => {
                    by_ufrag.remove(&ufrag);
                    by_addr.retain(|_, u| *u != ufrag);
                }
                None => return,
            },
            () = shutdown.cancelled() => return,
        }
    }
}

/// The ufrag of a known session that a STUN binding request is for; garbage, and requests
/// for no session, are dropped.
fn session_of(
    data: &[u8],
    sessions: &HashMap<Arc<str>, mpsc::UnboundedSender<Command>>,
) -> Option<Arc<str>> {
    let stun = StunMessage::parse(data).ok()?;
    let (ours, _) = stun.split_username()?;
    sessions.get_key_value(ours).map(|(k, _)| k.clone())
}

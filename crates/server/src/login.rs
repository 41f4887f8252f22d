//! Browser logins: the web page's cookie and the one-time tickets that open a page in a fresh
//! browser. Both are random server-side secrets that stand for a [`Principal`]; the bearer
//! token itself never goes into a cookie or a URL that stays in history or logs.
//!
//! Entry type: [`Logins`], one per server, in memory (a restarted server forgets every login
//! and ticket; the page then asks for the token again). Whether a request may use a login is
//! decided by `auth::resolve`, not here.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::auth::Principal;

/// A login ends after this long without a request that uses it.
pub const LOGIN_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);
/// A ticket must be redeemed within this long.
pub const TICKET_TTL: Duration = Duration::from_secs(10 * 60);
/// Logins kept at most; one more ends the least recently used.
const LOGINS_MAX: usize = 256;
/// Unredeemed tickets kept at most; one more drops the oldest.
const TICKETS_MAX: usize = 1024;
/// Characters of the public id and of the secret (base 36: about 103 and 207 bits).
const ID_CHARS: usize = 20;
const SECRET_CHARS: usize = 40;

/// The server's logins and tickets.
pub struct Logins {
    cookie_name: String,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    logins: HashMap<String, Entry>,
    tickets: HashMap<String, Entry>,
}

struct Entry {
    secret: String,
    principal: Principal,
    expires: Instant,
}

impl Logins {
    /// Logins for the server on `port`: cookies are not separated by port, so the cookie's name
    /// carries it (two servers on one host keep their own logins).
    pub fn new(port: u16) -> Self {
        Self {
            cookie_name: format!("ptyhub_login_{port}"),
            entries: Mutex::default(),
        }
    }

    /// The name of the login cookie.
    pub fn cookie_name(&self) -> &str {
        &self.cookie_name
    }

    /// Starts a login for `principal`; returns the cookie's value.
    pub fn open(&self, principal: Principal) -> String {
        self.open_at(principal, Instant::now())
    }

    /// The principal of a login cookie's value, if it is current; the login stays open
    /// [`LOGIN_IDLE`] longer.
    pub fn find(&self, value: &str) -> Option<Principal> {
        self.find_at(value, Instant::now())
    }

    /// Ends the login with this cookie value, if any.
    pub fn close(&self, value: &str) {
        let mut entries = self.lock();
        if let Some((id, secret)) = value.split_once('.')
            && entries
                .logins
                .get(id)
                .is_some_and(|entry| secrets_match(&entry.secret, secret))
        {
            entries.logins.remove(id);
        }
    }

    /// A one-time ticket for `principal`, valid for [`TICKET_TTL`].
    pub fn issue_ticket(&self, principal: Principal) -> String {
        self.issue_ticket_at(principal, Instant::now())
    }

    /// The principal of a ticket, once: a redeemed, expired or unknown ticket is `None`.
    pub fn redeem_ticket(&self, ticket: &str) -> Option<Principal> {
        self.redeem_ticket_at(ticket, Instant::now())
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Every critical section leaves the maps consistent, so a panic elsewhere is no reason
        // to refuse logins from now on.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_at(&self, principal: Principal, now: Instant) -> String {
        let mut entries = self.lock();
        insert_bounded(
            &mut entries.logins,
            principal,
            now + LOGIN_IDLE,
            now,
            LOGINS_MAX,
        )
    }

    fn find_at(&self, value: &str, now: Instant) -> Option<Principal> {
        let (id, secret) = value.split_once('.')?;
        let mut entries = self.lock();
        let entry = entries.logins.get_mut(id)?;
        if !secrets_match(&entry.secret, secret) {
            return None;
        }
        if entry.expires <= now {
            entries.logins.remove(id);
            return None;
        }
        entry.expires = now + LOGIN_IDLE;
        Some(entry.principal.clone())
    }

    fn issue_ticket_at(&self, principal: Principal, now: Instant) -> String {
        let mut entries = self.lock();
        insert_bounded(
            &mut entries.tickets,
            principal,
            now + TICKET_TTL,
            now,
            TICKETS_MAX,
        )
    }

    fn redeem_ticket_at(&self, ticket: &str, now: Instant) -> Option<Principal> {
        let (id, secret) = ticket.split_once('.')?;
        let mut entries = self.lock();
        if !entries
            .tickets
            .get(id)
            .is_some_and(|entry| secrets_match(&entry.secret, secret))
        {
            return None;
        }
        let entry = entries.tickets.remove(id)?;
        (entry.expires > now).then_some(entry.principal)
    }
}

/// Adds an entry (dropping expired ones, then the one closest to expiry when full) and returns
/// its `<id>.<secret>` value.
fn insert_bounded(
    map: &mut HashMap<String, Entry>,
    principal: Principal,
    expires: Instant,
    now: Instant,
    max: usize,
) -> String {
    map.retain(|_, entry| entry.expires > now);
    while map.len() >= max {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, entry)| entry.expires)
            .map(|(id, _)| id.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
    let id = ptyhub_core::secret::random_token(ID_CHARS);
    let secret = ptyhub_core::secret::random_token(SECRET_CHARS);
    let value = format!("{id}.{secret}");
    map.insert(
        id,
        Entry {
            secret,
            principal,
            expires,
        },
    );
    value
}

fn secrets_match(expected: &str, given: &str) -> bool {
    crate::auth::constant_time_eq(expected.as_bytes(), given.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn someone() -> Principal {
        Principal::everything("1000".to_owned())
    }

    #[test]
    fn a_ticket_is_redeemed_once() {
        let logins = Logins::new(1);
        let ticket = logins.issue_ticket(someone());
        assert_eq!(
            logins.redeem_ticket(&ticket).map(|p| p.owner),
            Some("1000".to_owned())
        );
        assert!(logins.redeem_ticket(&ticket).is_none(), "single use");
    }

    #[test]
    fn a_ticket_expires() {
        let logins = Logins::new(1);
        let now = Instant::now();
        let ticket = logins.issue_ticket_at(someone(), now);
        assert!(logins.redeem_ticket_at(&ticket, now + TICKET_TTL).is_none());
        assert!(
            logins.redeem_ticket_at(&ticket, now).is_none(),
            "an expired ticket is gone"
        );
    }

    #[test]
    fn a_wrong_secret_neither_redeems_nor_burns_a_ticket() {
        let logins = Logins::new(1);
        let ticket = logins.issue_ticket(someone());
        let (id, _) = ticket.split_once('.').unwrap_or_default();
        assert!(logins.redeem_ticket(&format!("{id}.guess")).is_none());
        assert!(logins.redeem_ticket(id).is_none());
        assert!(logins.redeem_ticket(&ticket).is_some());
    }

    #[test]
    fn a_ticket_is_not_a_login_and_a_login_is_not_a_ticket() {
        let logins = Logins::new(1);
        let ticket = logins.issue_ticket(someone());
        let login = logins.open(someone());
        assert!(logins.find(&ticket).is_none());
        assert!(logins.redeem_ticket(&login).is_none());
    }

    #[test]
    fn a_login_lasts_while_it_is_used_and_ends_when_closed() {
        let logins = Logins::new(1);
        let now = Instant::now();
        let login = logins.open_at(someone(), now);
        let later = now + LOGIN_IDLE - Duration::from_secs(1);
        assert!(logins.find_at(&login, later).is_some(), "use extends it");
        assert!(logins.find_at(&login, later + LOGIN_IDLE / 2).is_some());
        assert!(
            logins
                .find_at(&login, later + LOGIN_IDLE / 2 + LOGIN_IDLE)
                .is_none(),
            "idle too long"
        );
        let other = logins.open(someone());
        logins.close("nonsense");
        logins.close(&format!(
            "{}.wrong",
            other.split_once('.').unwrap_or_default().0
        ));
        assert!(
            logins.find(&other).is_some(),
            "only its own value closes it"
        );
        logins.close(&other);
        assert!(logins.find(&other).is_none());
    }

    #[test]
    fn logins_are_bounded() {
        let logins = Logins::new(1);
        let now = Instant::now();
        let first = logins.open_at(someone(), now);
        let mut last = String::new();
        for i in 0..LOGINS_MAX {
            last = logins.open_at(someone(), now + Duration::from_secs(1 + i as u64));
        }
        assert_eq!(logins.lock().logins.len(), LOGINS_MAX);
        assert!(
            logins.find_at(&first, now).is_none(),
            "the oldest was dropped"
        );
        assert!(logins.find_at(&last, now).is_some());
    }

    #[test]
    fn the_cookie_name_carries_the_port() {
        assert_eq!(Logins::new(18091).cookie_name(), "ptyhub_login_18091");
    }
}

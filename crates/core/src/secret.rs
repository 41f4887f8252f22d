//! Random secrets: the integration nonce of each terminal, tokens, login ids. Drawn from the
//! operating system's generator through `rand`'s thread-local one.

use rand::Rng;

/// A random token of `len` lowercase letters and digits.
pub fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

//! Connections that have not earned a place yet (a gRPC connection before its first authenticated
//! call, an HTTP one before its request head), grouped by peer address, so that a full port
//! pushes out the right one: the oldest connection of the address that holds the most.
//!
//! Pushing out the oldest connection overall would let a flood from many addresses push out an
//! honest newcomer before it says a word, however few connections its address holds: all a
//! flood needs is to open connections faster than the newcomer can send its first call. Taken
//! from the address that holds the most, a newcomer that is alone on its address is pushed out
//! only once every other address holds at most one waiting connection, so a flood must come from
//! as many addresses as the port has places.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// The waiting connections (each with a value `V`, say what closes it), by peer address, oldest
/// first: ids must be given in increasing order.
#[derive(Debug)]
pub struct Waiting<V> {
    by_address: HashMap<IpAddr, BTreeMap<u64, V>>,
    /// (connections held, address) for every address that holds any: the last holds the most.
    by_count: BTreeSet<(usize, IpAddr)>,
    len: usize,
}

impl<V> Default for Waiting<V> {
    fn default() -> Self {
        Waiting { by_address: HashMap::new(), by_count: BTreeSet::new(), len: 0 }
    }
}

impl<V> Waiting<V> {
    /// How many connections wait, from every address together.
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many connections from `ip` wait.
    pub fn held_by(&self, ip: IpAddr) -> usize {
        self.by_address.get(&ip).map_or(0, BTreeMap::len)
    }

    /// Adds connection `id` from `ip`; `id` must be larger than every id added before.
    pub fn insert(&mut self, ip: IpAddr, id: u64, value: V) {
        let held = self.by_address.entry(ip).or_default();
        self.by_count.remove(&(held.len(), ip));
        held.insert(id, value);
        self.by_count.insert((held.len(), ip));
        self.len += 1;
    }

    /// Takes connection `id` of `ip` out (it earned its place, or it closed): its value, or
    /// `None` where it is not waiting (any longer).
    pub fn remove(&mut self, ip: IpAddr, id: u64) -> Option<V> {
        let held = self.by_address.get_mut(&ip)?;
        let before = held.len();
        let value = held.remove(&id)?;
        self.by_count.remove(&(before, ip));
        if held.is_empty() {
            self.by_address.remove(&ip);
        } else {
            self.by_count.insert((held.len(), ip));
        }
        self.len -= 1;
        Some(value)
    }

    /// Takes out the connection to push out: the oldest of the address that holds the most
    /// (of two holding as many, the larger address). `None` when nothing waits.
    pub fn pop_most_held(&mut self) -> Option<(IpAddr, u64, V)> {
        let &(_, ip) = self.by_count.last()?;
        let id = *self.by_address.get(&ip)?.keys().next()?;
        let value = self.remove(ip, id)?;
        Some((ip, id, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        [127, 0, 0, last].into()
    }

    #[test]
    fn the_oldest_of_the_address_holding_the_most_goes_first() {
        let mut w = Waiting::default();
        // One honest newcomer on .1, the oldest of all; a flood from .2 and .3.
        w.insert(ip(1), 0, "honest");
        for id in 1..=6 {
            w.insert(ip(2 + (id % 2) as u8), id, "flood");
        }
        assert_eq!((w.len(), w.held_by(ip(1)), w.held_by(ip(2)), w.held_by(ip(3))), (7, 1, 3, 3));
        let mut order = Vec::new();
        while let Some((from, id, value)) = w.pop_most_held() {
            order.push((from, id, value));
        }
        // The flood's addresses take turns, each its oldest first; the newcomer goes last.
        let ids: Vec<u64> = order.iter().map(|(_, id, _)| *id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 0]);
        assert_eq!(order.last().unwrap().2, "honest");
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn removed_connections_are_no_longer_counted() {
        let mut w = Waiting::default();
        for id in 0..4 {
            w.insert(ip(2), id, id);
        }
        w.insert(ip(3), 4, 4);
        assert_eq!(w.remove(ip(2), 1), Some(1));
        assert_eq!(w.remove(ip(2), 1), None, "only once");
        assert_eq!(w.remove(ip(3), 0), None, "not from that address");
        assert_eq!((w.len(), w.held_by(ip(2))), (4, 3));
        for id in [0, 2, 3] {
            assert_eq!(w.remove(ip(2), id), Some(id));
        }
        assert_eq!(w.held_by(ip(2)), 0);
        assert_eq!(w.pop_most_held(), Some((ip(3), 4, 4)));
        assert_eq!(w.pop_most_held(), None);
    }
}

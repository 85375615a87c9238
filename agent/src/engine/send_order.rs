//! In what order a shard writes a broadcast to its clients: the same
//! connection order every time (`fixed`), starting one place further each
//! broadcast (`rotate`, so being last is shared), or a fresh random
//! permutation (`shuffle`). Kept apart from the send loop so it can be
//! tested alone.

use skewscope_core::record::SendOrder;

/// One shard's send-order state across broadcasts.
#[derive(Debug)]
pub struct Sequencer {
    order: SendOrder,
    rotation: usize,
    shuffled: Vec<usize>,
    rng: fastrand::Rng,
}

impl Sequencer {
    /// A sequencer for `order`; `rng` draws the shuffles.
    pub fn new(order: SendOrder, rng: fastrand::Rng) -> Sequencer {
        Sequencer {
            order,
            rotation: 0,
            shuffled: Vec::new(),
            rng,
        }
    }

    /// The next broadcast's order over `clients` (given in connection
    /// order): every client exactly once. Allocates nothing once warm.
    pub fn next<'a>(&'a mut self, clients: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
        let n = clients.len();
        let (sequence, first): (&[usize], usize) = match self.order {
            SendOrder::Fixed => (clients, 0),
            SendOrder::Rotate => {
                self.rotation = self.rotation.wrapping_add(1);
                (clients, if n > 0 { self.rotation % n } else { 0 })
            }
            SendOrder::Shuffle => {
                self.shuffled.clear();
                self.shuffled.extend_from_slice(clients);
                self.rng.shuffle(&mut self.shuffled);
                (&self.shuffled, 0)
            }
        };
        (0..n).map(move |i| sequence[(first + i) % n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders(order: SendOrder, clients: &[usize], broadcasts: usize) -> Vec<Vec<usize>> {
        let mut s = Sequencer::new(order, fastrand::Rng::with_seed(7));
        (0..broadcasts).map(|_| s.next(clients).collect()).collect()
    }

    #[test]
    fn every_order_sends_to_every_client_exactly_once() {
        let clients = [4, 9, 2, 7, 5];
        for order in [SendOrder::Fixed, SendOrder::Rotate, SendOrder::Shuffle] {
            for mut o in orders(order, &clients, 20) {
                o.sort();
                assert_eq!(o, vec![2, 4, 5, 7, 9]);
            }
        }
        assert!(orders(SendOrder::Rotate, &[], 3).iter().all(Vec::is_empty));
    }

    #[test]
    fn fixed_keeps_connection_order_and_rotate_moves_the_start_along() {
        assert!(
            orders(SendOrder::Fixed, &[1, 2, 3], 4)
                .iter()
                .all(|o| o == &[1, 2, 3])
        );
        assert_eq!(
            orders(SendOrder::Rotate, &[1, 2, 3], 4),
            vec![vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3], vec![2, 3, 1]]
        );
    }

    #[test]
    fn rotate_shares_being_last_evenly() {
        let clients: Vec<usize> = (0..10).collect();
        let mut last = [0u32; 10];
        for o in orders(SendOrder::Rotate, &clients, 1000) {
            last[*o.last().unwrap()] += 1;
        }
        assert!(last.iter().all(|&n| n == 100), "{last:?}");
    }

    #[test]
    fn shuffle_draws_a_new_order_each_broadcast() {
        let clients: Vec<usize> = (0..10).collect();
        let all = orders(SendOrder::Shuffle, &clients, 50);
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert!(distinct.len() > 45, "{} distinct of 50", distinct.len());
    }
}

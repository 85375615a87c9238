//! What the link does to each packet, decided without I/O: handed the time
//! a packet reached the link, it answers when the packet leaves the other
//! end, or that it is lost. Seeded, so a simulation through it is the same
//! every run; the relays ([`crate::relay`]) ask it for every packet they
//! carry, and the benchmarks drive it with simulated time.

use std::collections::HashMap;

use serde::Serialize;

use crate::profile::{Jitter, Profile, Way};

/// Which way a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Device to server.
    Up,
    /// Server to device.
    Down,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::Up => 0,
            Direction::Down => 1,
        }
    }
}

/// What carries a packet: a TCP stream keeps its order and loses nothing;
/// datagrams may be lost and overtake each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Carrier {
    /// Bytes of one TCP connection.
    Tcp {
        /// The connection.
        flow: u64,
    },
    /// One datagram.
    Udp,
}

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    /// It leaves the link at this time (ns, the caller's clock).
    Deliver {
        /// When.
        at_ns: u64,
    },
    /// It is lost.
    Lose,
}

/// One device's link: the profile's two directions and its radio, with the
/// state that makes one packet's fate depend on the ones before it.
#[derive(Clone, Debug)]
pub struct LinkModel {
    profile: Profile,
    rng: fastrand::Rng,
    /// Per direction: held until then.
    stall_until: [u64; 2],
    /// Per direction: the last bit of the latest packet leaves then.
    line_free: [u64; 2],
    /// The radio stays awake until then.
    awake_until: u64,
    /// The radio wakes then (a doze in progress).
    wakes_at: u64,
    /// Per TCP connection and direction: its latest delivery.
    stream_tail: HashMap<(u64, Direction), u64>,
}

impl LinkModel {
    /// A link of `profile`, its chance drawn from `seed`.
    pub fn new(profile: Profile, seed: u64) -> LinkModel {
        LinkModel {
            profile,
            rng: fastrand::Rng::with_seed(seed),
            stall_until: [0; 2],
            line_free: [0; 2],
            awake_until: 0,
            wakes_at: 0,
            stream_tail: HashMap::new(),
        }
    }

    /// Follows `profile` from now on: the site changed (a microwave, a
    /// crowd, a channel change). What is in flight keeps its fate, and each
    /// stream stays in order (a packet never overtakes one sent before it).
    pub fn set_profile(&mut self, profile: Profile) {
        self.profile = profile;
    }

    /// The profile it follows.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The fate of a packet of `bytes` that reached the link at `arrived_ns`.
    pub fn fate(
        &mut self,
        direction: Direction,
        carrier: Carrier,
        arrived_ns: u64,
        bytes: usize,
    ) -> Fate {
        let way = match direction {
            Direction::Up => self.profile.up,
            Direction::Down => self.profile.down,
        };
        if carrier == Carrier::Udp && self.chance(way.loss_percent) {
            return Fate::Lose;
        }
        let d = direction.index();
        let mut leaves = arrived_ns;
        // A dozing radio.
        if let Some(ps) = self.profile.power_save {
            if arrived_ns < self.wakes_at {
                leaves = self.wakes_at;
            } else if arrived_ns > self.awake_until && self.chance(ps.percent) {
                self.wakes_at = match direction {
                    Direction::Up => arrived_ns + self.between(ps.wake_min_ns, ps.wake_max_ns),
                    Direction::Down => arrived_ns.div_ceil(ps.beacon_ns) * ps.beacon_ns,
                };
                leaves = self.wakes_at;
            }
            self.awake_until = self.awake_until.max(leaves + ps.idle_ns);
        }
        // A stall of this direction holds this packet and those behind it.
        if let Some(stall) = way.stall
            && self.chance(stall.percent)
        {
            let until = arrived_ns + self.between(stall.min_ns, stall.max_ns);
            self.stall_until[d] = self.stall_until[d].max(until);
        }
        leaves = leaves.max(self.stall_until[d]);
        // The line: one packet at a time at the direction's rate.
        let on_line = way.rate_bps.map_or(0, |rate| {
            (bytes as u128 * 8 * 1_000_000_000 / u128::from(rate)) as u64
        });
        self.line_free[d] = self.line_free[d].max(leaves) + on_line;
        let mut at = self.line_free[d] + way.base_ns + self.jitter(&way);
        if let Carrier::Tcp { flow } = carrier {
            let tail = self.stream_tail.entry((flow, direction)).or_insert(0);
            at = at.max(*tail);
            *tail = at;
        }
        Fate::Deliver { at_ns: at }
    }

    /// Forgets one direction of a TCP connection once its end is on its
    /// way: nothing more comes that must keep its order, and a relay that
    /// runs for days through reconnects keeps no entry per connection ever
    /// opened.
    pub fn end_stream(&mut self, flow: u64, direction: Direction) {
        self.stream_tail.remove(&(flow, direction));
    }

    /// TCP directions whose order is kept now.
    pub fn streams_kept(&self) -> usize {
        self.stream_tail.len()
    }

    fn chance(&mut self, percent: f64) -> bool {
        percent > 0.0 && self.rng.f64() * 100.0 < percent
    }

    fn between(&mut self, min: u64, max: u64) -> u64 {
        if max <= min {
            min
        } else {
            self.rng.u64(min..=max)
        }
    }

    fn jitter(&mut self, way: &Way) -> u64 {
        match way.jitter {
            Jitter::None => 0,
            Jitter::Exponential { mean_ns } => {
                (-(mean_ns as f64) * (1.0 - self.rng.f64()).ln()) as u64
            }
            Jitter::Uniform { max_ns } => self.rng.u64(0..=max_ns),
            Jitter::Pareto { mean_ns } => {
                // Shape 1.5: mean = scale · 1.5 / 0.5, so scale = mean / 3.
                let scale = mean_ns as f64 / 3.0;
                (scale * ((1.0 - self.rng.f64()).powf(-1.0 / 1.5) - 1.0)) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn delays(profile: Profile, direction: Direction, n: usize, gap_ns: u64) -> Vec<Option<u64>> {
        let mut link = LinkModel::new(profile, 1);
        (0..n as u64)
            .map(|i| {
                let at = i * gap_ns;
                match link.fate(direction, Carrier::Udp, at, 48) {
                    Fate::Deliver { at_ns } => Some(at_ns - at),
                    Fate::Lose => None,
                }
            })
            .collect()
    }

    #[test]
    fn no_packet_is_faster_than_the_base() {
        for p in Profile::ALL {
            for d in [Direction::Up, Direction::Down] {
                let base = if d == Direction::Up {
                    p.up.base_ns
                } else {
                    p.down.base_ns
                };
                for delay in delays(p, d, 2_000, 1_000_000).into_iter().flatten() {
                    assert!(delay >= base, "{}: {delay} < {base}", p.name);
                }
            }
        }
    }

    #[test]
    fn good_wifi_loses_about_one_percent_and_stalls_now_and_then() {
        let d = delays(Profile::GOOD_WIFI, Direction::Up, 20_000, 5_000_000);
        let lost = d.iter().filter(|x| x.is_none()).count();
        assert!((100..=300).contains(&lost), "{lost}");
        let held = d.iter().flatten().filter(|&&x| x >= 30_000_000).count();
        assert!(held >= 100, "{held}");
    }

    #[test]
    fn an_ended_stream_keeps_nothing() {
        let mut link = LinkModel::new(Profile::GOOD_WIFI, 3);
        for flow in 0..1_000u64 {
            for direction in [Direction::Up, Direction::Down] {
                link.fate(direction, Carrier::Tcp { flow }, flow * 1_000, 100);
            }
            assert_eq!(link.streams_kept(), 2);
            link.end_stream(flow, Direction::Up);
            assert_eq!(link.streams_kept(), 1);
            link.end_stream(flow, Direction::Down);
            assert_eq!(link.streams_kept(), 0);
        }
    }

    #[test]
    fn a_stream_keeps_its_order_and_datagrams_may_not() {
        let mut link = LinkModel::new(Profile::BUSY_WIFI, 3);
        let mut last = 0;
        for i in 0..5_000u64 {
            let Fate::Deliver { at_ns } =
                link.fate(Direction::Down, Carrier::Tcp { flow: 1 }, i * 100_000, 500)
            else {
                panic!("TCP is never lost");
            };
            assert!(at_ns >= last);
            last = at_ns;
        }
        let mut link = LinkModel::new(Profile::BUSY_WIFI, 3);
        let times: Vec<u64> = (0..5_000u64)
            .filter_map(
                |i| match link.fate(Direction::Down, Carrier::Udp, i * 100_000, 48) {
                    Fate::Deliver { at_ns } => Some(at_ns),
                    Fate::Lose => None,
                },
            )
            .collect();
        assert!(
            times.windows(2).any(|w| w[1] < w[0]),
            "jitter reorders datagrams"
        );
    }

    #[test]
    fn a_dozing_radio_holds_the_first_packet_and_not_the_one_right_after() {
        let ps = Profile::GOOD_WIFI.power_save.unwrap();
        let mut profile = Profile::GOOD_WIFI;
        profile.up.stall = None;
        profile.up.jitter = Jitter::None;
        profile.up.loss_percent = 0.0;
        let mut held_first = 0;
        let mut held_second = 0;
        let mut link = LinkModel::new(profile, 9);
        for i in 0..1_000u64 {
            // A pair every second: the radio may doze in between.
            let t = i * 1_000_000_000;
            let Fate::Deliver { at_ns: first } = link.fate(Direction::Up, Carrier::Udp, t, 48)
            else {
                unreachable!()
            };
            let Fate::Deliver { at_ns: second } =
                link.fate(Direction::Up, Carrier::Udp, first + 1_000_000, 48)
            else {
                unreachable!()
            };
            held_first += u32::from(first - t > profile.up.base_ns + 10_000);
            held_second += u32::from(second - (first + 1_000_000) > profile.up.base_ns + 10_000);
        }
        assert!(
            (300..700).contains(&held_first),
            "{held_first} (doze chance {}%)",
            ps.percent
        );
        assert_eq!(held_second, 0);
    }
}

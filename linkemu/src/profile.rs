//! Link profiles: what each direction of a device's link does to a packet.
//!
//! The figures are chosen to look like the links the field has, not any one
//! measurement: a switched gigabit LAN; a decent Wi-Fi (about a millisecond
//! each way, a few ms of jitter, a radio in power save that holds a packet
//! for 30–60 ms now and then, 1 % loss); a busy one (a crowded channel:
//! retries, 50–120 ms holds, 3 % loss); and an asymmetric link whose down
//! path is five times its up path (a shaped uplink, a queue in one
//! direction), which no two-way exchange can tell from a symmetric one;
//! and radios that doze hard (holds of 30-600 ms, as ESP32 boards in power
//! save show).

use serde::Serialize;

/// How one packet's extra delay is drawn, on top of the base.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Jitter {
    /// None: every packet takes the base delay.
    None,
    /// Exponential with this mean: most packets near the base, a tail.
    Exponential {
        /// Mean, ns.
        mean_ns: u64,
    },
    /// Uniform between 0 and this.
    Uniform {
        /// Largest, ns.
        max_ns: u64,
    },
    /// Pareto (shape 1.5), scaled to this mean: a heavy tail.
    Pareto {
        /// Mean, ns.
        mean_ns: u64,
    },
}

/// Now and then a packet is held, and every packet behind it in that
/// direction waits with it (a radio that holds its queue).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stall {
    /// Chance per packet, percent.
    pub percent: f64,
    /// Shortest hold, ns.
    pub min_ns: u64,
    /// Longest hold, ns.
    pub max_ns: u64,
}

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Way {
    /// Every packet's least delay, ns.
    pub base_ns: u64,
    /// The extra delay per packet.
    pub jitter: Jitter,
    /// Holds of the whole direction.
    pub stall: Option<Stall>,
    /// Chance a datagram is lost, percent (TCP is never dropped: the
    /// kernel's retransmission would only show as a stall).
    pub loss_percent: f64,
    /// The direction's rate, bits per second (`None`: unlimited).
    pub rate_bps: Option<u64>,
}

/// A radio in power save: after a quiet spell it dozes; the next packet up
/// waits for it to wake, the next packet down waits for the next beacon,
/// and it stays awake a moment after any packet.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PowerSave {
    /// Quiet time after which it may doze, ns.
    pub idle_ns: u64,
    /// Chance it dozes once it may, percent.
    pub percent: f64,
    /// Time for it to wake for a packet it sends: shortest and longest, ns.
    pub wake_min_ns: u64,
    /// ... longest.
    pub wake_max_ns: u64,
    /// Beacon interval: a packet for a dozing radio waits for the next, ns.
    pub beacon_ns: u64,
}

/// A device's link to the server, both ways.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Profile {
    /// Its name, as the command line takes it.
    pub name: &'static str,
    /// Device to server.
    pub up: Way,
    /// Server to device.
    pub down: Way,
    /// The device's radio, when it dozes.
    pub power_save: Option<PowerSave>,
}

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

impl Profile {
    /// A switched gigabit LAN: 60 µs each way, 20 µs of jitter.
    pub const WIRED: Profile = Profile {
        name: "wired",
        up: WIRED_WAY,
        down: WIRED_WAY,
        power_save: None,
    };

    /// A decent Wi-Fi: 1 ms each way, 2 ms of jitter on average, 1 % of
    /// packets held 30–60 ms, 1 % of datagrams lost, a radio that dozes.
    pub const GOOD_WIFI: Profile = Profile {
        name: "good-wifi",
        up: GOOD_WIFI_WAY,
        down: GOOD_WIFI_WAY,
        power_save: Some(POWER_SAVE),
    };

    /// A busy Wi-Fi: 1.5 ms each way, 6 ms of jitter on average, 3 % of
    /// packets held 50–120 ms, 3 % of datagrams lost, a radio that dozes.
    pub const BUSY_WIFI: Profile = Profile {
        name: "busy-wifi",
        up: BUSY_WIFI_WAY,
        down: BUSY_WIFI_WAY,
        power_save: Some(POWER_SAVE),
    };

    /// Down five times up: 0.4 ms and 2 ms base, jitter in proportion.
    pub const ASYMMETRIC: Profile = Profile {
        name: "asymmetric",
        up: Way {
            base_ns: 400 * US,
            jitter: Jitter::Exponential { mean_ns: 100 * US },
            stall: None,
            loss_percent: 0.0,
            rate_bps: Some(100_000_000),
        },
        down: Way {
            base_ns: 2 * MS,
            jitter: Jitter::Exponential { mean_ns: 500 * US },
            stall: None,
            loss_percent: 0.0,
            rate_bps: Some(100_000_000),
        },
        power_save: None,
    };

    /// Radios that doze hard, as ESP32 boards in power save do (users
    /// report pings of 28-577 ms): 2 ms each way with 2 ms of jitter, a
    /// radio that dozes after 100 ms of quiet nine times in ten, waking
    /// 30-300 ms to send and holding what comes for it to the next DTIM
    /// beacon (307.2 ms: three of 102.4), and 0.5 % of packets held
    /// 30-600 ms on top.
    pub const DOZING: Profile = Profile {
        name: "dozing",
        up: DOZING_WAY,
        down: DOZING_WAY,
        power_save: Some(PowerSave {
            idle_ns: 100 * MS,
            percent: 90.0,
            wake_min_ns: 30 * MS,
            wake_max_ns: 300 * MS,
            beacon_ns: 307_200_000,
        }),
    };

    /// Every profile, in the order reports list them.
    pub const ALL: [Profile; 5] = [
        Profile::WIRED,
        Profile::GOOD_WIFI,
        Profile::BUSY_WIFI,
        Profile::ASYMMETRIC,
        Profile::DOZING,
    ];

    /// The profile of this name.
    pub fn named(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.name == name)
    }

    /// Half of the least delay up plus the least down: no two-way exchange
    /// over this link can bound an offset tighter than this.
    pub fn physical_limit_ns(&self) -> u64 {
        (self.up.base_ns + self.down.base_ns) / 2
    }
}

const WIRED_WAY: Way = Way {
    base_ns: 60 * US,
    jitter: Jitter::Exponential { mean_ns: 20 * US },
    stall: None,
    loss_percent: 0.0,
    rate_bps: Some(1_000_000_000),
};

const GOOD_WIFI_WAY: Way = Way {
    base_ns: MS,
    jitter: Jitter::Exponential { mean_ns: 2 * MS },
    stall: Some(Stall {
        percent: 1.0,
        min_ns: 30 * MS,
        max_ns: 60 * MS,
    }),
    loss_percent: 1.0,
    rate_bps: Some(100_000_000),
};

const BUSY_WIFI_WAY: Way = Way {
    base_ns: 1_500 * US,
    jitter: Jitter::Exponential { mean_ns: 6 * MS },
    stall: Some(Stall {
        percent: 3.0,
        min_ns: 50 * MS,
        max_ns: 120 * MS,
    }),
    loss_percent: 3.0,
    rate_bps: Some(20_000_000),
};

const DOZING_WAY: Way = Way {
    base_ns: 2 * MS,
    jitter: Jitter::Exponential { mean_ns: 2 * MS },
    stall: Some(Stall {
        percent: 0.5,
        min_ns: 30 * MS,
        max_ns: 600 * MS,
    }),
    loss_percent: 1.0,
    rate_bps: Some(20_000_000),
};

const POWER_SAVE: PowerSave = PowerSave {
    idle_ns: 200 * MS,
    percent: 50.0,
    wake_min_ns: 2 * MS,
    wake_max_ns: 10 * MS,
    beacon_ns: 102_400_000,
};

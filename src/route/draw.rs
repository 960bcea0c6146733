//! RANDOMKEY over a keyspace spread across masters: each master draws from its own keys
//! only, and some of those are kept from clients (records of live moves, a layout's own
//! keys), so a draw goes master by master, a random one first, each asked a few times.

use std::future::Future;
use std::hash::BuildHasher;

/// How often one master's RANDOMKEY is asked before it counts as holding only keys that
/// clients do not see.
pub const RANDOM_DRAWS: usize = 8;

/// What one master's RANDOMKEY gave.
pub enum Draw<T> {
    /// A key clients see: the answer.
    Shown(T),
    /// A key kept from clients: draw again.
    Hidden,
    /// No key at all: the next master.
    Empty,
}

/// Asks `draw` of master `0..masters`, a random one first, up to [`RANDOM_DRAWS`] times
/// each, until one shows a key; `None` when none did. An error ends the draw.
pub async fn draw_by_master<T, E, Drawn>(
    masters: usize,
    mut draw: impl FnMut(usize) -> Drawn,
) -> Result<Option<T>, E>
where
    Drawn: Future<Output = Result<Draw<T>, E>>,
{
    if masters == 0 {
        return Ok(None);
    }
    // Any start will do; RandomState is seeded per instance from the OS.
    let start = (std::hash::RandomState::new().hash_one(0u8) as usize) % masters;
    for i in 0..masters {
        let master = (start + i) % masters;
        for _ in 0..RANDOM_DRAWS {
            match draw(master).await? {
                Draw::Shown(key) => return Ok(Some(key)),
                Draw::Hidden => continue,
                Draw::Empty => break,
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn run<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    #[test]
    fn every_master_is_asked_until_one_shows_a_key() {
        // Master 2 alone holds a key clients see; the others hold hidden keys or none.
        let asked = RefCell::new(vec![0; 4]);
        let drawn = run(draw_by_master(4, |master| {
            asked.borrow_mut()[master] += 1;
            async move {
                Ok::<_, ()>(match master {
                    0 => Draw::Hidden,
                    2 => Draw::Shown("key"),
                    _ => Draw::Empty,
                })
            }
        }));
        assert_eq!(drawn, Ok(Some("key")));
        let asked = asked.into_inner();
        // A master of hidden keys only is asked RANDOM_DRAWS times (if its turn came before
        // master 2's), an empty one once.
        assert!(asked[0] == 0 || asked[0] == RANDOM_DRAWS, "{asked:?}");
        assert!(asked[1] <= 1 && asked[3] <= 1, "{asked:?}");
        assert_eq!(asked[2], 1);
    }

    #[test]
    fn nothing_shown_anywhere_is_none_and_an_error_ends_the_draw() {
        let none = run(draw_by_master(3, |_| async {
            Ok::<Draw<()>, ()>(Draw::Hidden)
        }));
        assert_eq!(none, Ok(None));
        assert_eq!(
            run(draw_by_master(0, |_| async {
                Ok::<Draw<()>, ()>(Draw::Empty)
            })),
            Ok(None)
        );
        let calls = RefCell::new(0);
        let failed = run(draw_by_master(3, |_| {
            *calls.borrow_mut() += 1;
            async { Err::<Draw<()>, _>("down") }
        }));
        assert_eq!(failed, Err("down"));
        assert_eq!(calls.into_inner(), 1);
    }
}

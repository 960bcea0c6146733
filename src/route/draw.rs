//! RANDOMKEY over a keyspace spread across masters: each master draws from its own keys
//! only, and some of those are kept from clients (records of live moves, a layout's own
//! keys), so a draw goes master by master, a random one first, each asked a few times;
//! a master that drew only hidden keys is walked for a shown one, so that RANDOMKEY is nil
//! only when no key is shown.

use std::future::Future;
use std::hash::BuildHasher;

/// How often one master's RANDOMKEY is asked before its keys are walked for a shown one.
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
/// each, until one shows a key; a master whose draws were all hidden is then asked to
/// `walk` for its first shown key (SCAN), so `None` means no master holds a shown key.
/// An error ends the draw.
pub async fn draw_by_master<T, E, Drawn, Walked>(
    masters: usize,
    mut draw: impl FnMut(usize) -> Drawn,
    mut walk: impl FnMut(usize) -> Walked,
) -> Result<Option<T>, E>
where
    Drawn: Future<Output = Result<Draw<T>, E>>,
    Walked: Future<Output = Result<Option<T>, E>>,
{
    if masters == 0 {
        return Ok(None);
    }
    // Any start will do; RandomState is seeded per instance from the OS.
    let start = (std::hash::RandomState::new().hash_one(0u8) as usize) % masters;
    for i in 0..masters {
        let master = (start + i) % masters;
        let mut hidden = 0;
        while hidden < RANDOM_DRAWS {
            match draw(master).await? {
                Draw::Shown(key) => return Ok(Some(key)),
                Draw::Hidden => hidden += 1,
                Draw::Empty => break,
            }
        }
        // A few shown keys among many hidden ones (compacted fences, a layout's indices)
        // can escape any number of draws; the walk cannot miss them.
        if hidden == RANDOM_DRAWS {
            if let Some(key) = walk(master).await? {
                return Ok(Some(key));
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
        let walked = RefCell::new(vec![0; 4]);
        let drawn = run(draw_by_master(
            4,
            |master| {
                asked.borrow_mut()[master] += 1;
                async move {
                    Ok::<_, ()>(match master {
                        0 => Draw::Hidden,
                        2 => Draw::Shown("key"),
                        _ => Draw::Empty,
                    })
                }
            },
            |master| {
                walked.borrow_mut()[master] += 1;
                async { Ok(None) }
            },
        ));
        assert_eq!(drawn, Ok(Some("key")));
        let (asked, walked) = (asked.into_inner(), walked.into_inner());
        // A master of hidden keys only is asked RANDOM_DRAWS times and then walked (if its
        // turn came before master 2's), an empty one asked once and never walked.
        assert!(asked[0] == 0 || asked[0] == RANDOM_DRAWS, "{asked:?}");
        assert_eq!(walked[0], usize::from(asked[0] > 0), "{walked:?}");
        assert!(asked[1] <= 1 && asked[3] <= 1, "{asked:?}");
        assert_eq!(asked[2], 1);
        assert_eq!((walked[1], walked[2], walked[3]), (0, 0, 0));
    }

    #[test]
    fn a_shown_key_among_hidden_ones_is_found_by_the_walk() {
        // Every draw hides; master 1's walk finds its one shown key.
        let drawn = run(draw_by_master(
            3,
            |_| async { Ok::<_, ()>(Draw::Hidden) },
            |master| async move { Ok((master == 1).then_some("few")) },
        ));
        assert_eq!(drawn, Ok(Some("few")));
    }

    #[test]
    fn nothing_shown_anywhere_is_none_and_an_error_ends_the_draw() {
        let nothing = |_| async { Ok::<Option<()>, &str>(None) };
        let none = run(draw_by_master(
            3,
            |_| async { Ok::<Draw<()>, _>(Draw::Hidden) },
            nothing,
        ));
        assert_eq!(none, Ok(None));
        assert_eq!(
            run(draw_by_master(
                0,
                |_| async { Ok::<Draw<()>, _>(Draw::Empty) },
                nothing
            )),
            Ok(None)
        );
        let calls = RefCell::new(0);
        let failed = run(draw_by_master(
            3,
            |_| {
                *calls.borrow_mut() += 1;
                async { Err::<Draw<()>, _>("down") }
            },
            nothing,
        ));
        assert_eq!(failed, Err("down"));
        assert_eq!(calls.into_inner(), 1);
        let failed_walk = run(draw_by_master(
            3,
            |_| async { Ok::<Draw<()>, _>(Draw::Hidden) },
            |_| async { Err::<Option<()>, _>("walk down") },
        ));
        assert_eq!(failed_walk, Err("walk down"));
    }
}

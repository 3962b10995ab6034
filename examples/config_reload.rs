//! Hot reload of a limits document: state is kept across a loosening, and a tightening
//! nobody acknowledged is refused while the old document keeps serving.
//!
//! Run with `cargo run --example config_reload --features config`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::time::Duration;

    use tollgate::limits::{Limits, LimitsHandle};
    use tollgate::{Check, ManualClock};

    let clock = ManualClock::new();
    let limits = Limits::from_path("examples/limits/valid.toml")?;
    let handle = LimitsHandle::builder(limits.clone())
        .clock(clock.clone())
        .max_keys(10_000)
        .build();

    // A free customer searching: 5/s, so the sixth request in the same instant is denied.
    let search = |n: usize| -> Result<usize, tollgate::InsufficientCapacity> {
        let mut allowed = 0;
        for _ in 0..n {
            let d = handle.check("free", "search", "/v1/search", "cust-7", Check::cost(1))?;
            allowed += usize::from(d.is_permitted());
        }
        Ok(allowed)
    };
    println!(
        "revision {}: cust-7 sent 8 searches, {} allowed",
        handle.revision(),
        search(8)?
    );
    let d = handle.check("free", "search", "/v1/search", "cust-7", Check::cost(1))?;
    if let Some(denied) = d.verdict().denied() {
        println!(
            "  next one denied by policy {:?}, retry after {:?}",
            d.policy().unwrap_or("(none)"),
            denied.retry_after()
        );
    }

    // Loosen free search to 10/s (burst 10) in revision 42, built from the loaded document.
    let loosened = Limits::from_toml(
        &limits
            .to_toml()
            .replace("revision = 41", "revision = 42")
            .replace("quota = \"5/s\"", "quota = \"10/s\""),
    )?;
    let diff = handle.reload(loosened)?;
    println!("\nreloaded to revision {}:\n{diff}", handle.revision());
    // cust-7 keeps its fill level: it had used its whole burst of 5, so it has used the whole
    // new burst of 10 too. A raised quota hands out no free burst.
    println!(
        "cust-7 sends 8 more at the same instant: {} allowed",
        search(8)?
    );
    // Half a second later it has earned 500 ms at the new rate: 5 requests, not 2.5.
    clock.advance(Duration::from_millis(500));
    println!("500 ms later, 8 more: {} allowed", search(8)?);

    // Paid checkout from 100/s to 100/min: 60× tighter, and nothing acknowledges it.
    let tightened = Limits::from_path("examples/limits/tightened.toml")?;
    let tightened = Limits::from_toml(
        &tightened
            .to_toml()
            .replace("revision = 42", "revision = 43")
            .replace("quota = \"5/s\"", "quota = \"10/s\""),
    )?;
    match handle.reload(tightened) {
        Ok(_) => println!("\nunexpected: the tightening was accepted"),
        Err(errors) => println!(
            "\nrefused, revision {} keeps serving:\n{errors}",
            handle.revision()
        ),
    }
    Ok(())
}

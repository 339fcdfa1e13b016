//! The order in which the server dispatches staged bundles (`_schedule_run_bundles_on_workers`).

use super::QueuedBundle;
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// The server's sort key of one bundle, largest first: a priority ≥ 0, then no priority, then
/// the priority itself, then a `request_queue` given (the server asks `is not None`; its
/// default is `None`, and an empty queue, which [`StagedBundle`](crate::StagedBundle) cannot
/// tell from none, counts as none here).
fn key(bundle: &QueuedBundle) -> (bool, bool, Option<i64>, bool) {
    let priority = bundle.priority();
    (
        priority.is_some_and(|p| p >= 0),
        priority.is_none(),
        priority,
        !bundle.bundle.request_queue.is_empty(),
    )
}

/// `bundles` (in the staged order) in the order the server dispatches them: each owner's
/// bundles sorted by the server's key (stable), in the positions that owner's bundles held.
pub fn server_order(bundles: Vec<QueuedBundle>) -> Vec<QueuedBundle> {
    let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (position, bundle) in bundles.iter().enumerate() {
        positions
            .entry(bundle.owner().to_owned())
            .or_default()
            .push(position);
    }
    let mut slots: Vec<Option<QueuedBundle>> = bundles.into_iter().map(Some).collect();
    let mut ordered: Vec<Option<QueuedBundle>> = vec![None; slots.len()];
    for owner_positions in positions.values() {
        let mut own: Vec<QueuedBundle> = owner_positions
            .iter()
            .filter_map(|&p| slots[p].take())
            .collect();
        own.sort_by_key(|b| Reverse(key(b)));
        for (&position, bundle) in owner_positions.iter().zip(own) {
            ordered[position] = Some(bundle);
        }
    }
    ordered.into_iter().flatten().collect()
}

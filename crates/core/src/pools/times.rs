//! What the manager knows of one pool's times ([`PoolTimes`]): how long its launches take to
//! check in, how long its platform queued them, how long its runs take, and its starting
//! workers. The pools' plan reads it to weigh spill and fallback; the start-time estimates
//! ([`crate::estimate`]) read it to say when each bundle starts.

/// What the manager knows of one pool's times, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolTimes {
    /// From a launch to the worker's first check-in, of launches the platform did not queue:
    /// learned from the pool's own launches, or the prior.
    pub checkin_seconds: u64,
    /// The same, of launches the platform queued (seen pending with a reason), once one of
    /// them has checked in: how long the platform's queue held them.
    pub queued_seconds: Option<u64>,
    /// How long a run takes on the pool's workers, once one was seen to end.
    pub run_seconds: Option<u64>,
    /// The pool's starting workers (pending, or running and not checked in), oldest first;
    /// those on hold ([`Starting::on_hold`]) are left out of every wait.
    pub coming: Vec<Starting>,
    /// Seconds since each run on the pool's workers was first seen.
    pub run_ages: Vec<u64>,
    /// Seconds between two launches of the pool beyond this tick's (its pacing).
    pub launch_interval: u64,
    /// New workers the pool may still start (its max less its jobs); `None`: no limit known.
    /// A bundle the decision puts on a new worker beyond these waits for runs to end (compat
    /// pools assign every bundle, as upstream counts them).
    pub room: Option<usize>,
}

/// A starting worker of a pool: launched, not yet checked in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Starting {
    /// Its job id.
    pub job: String,
    /// Seconds since its launch.
    pub age: u64,
    /// Still pending on its platform (queued, not yet running).
    pub pending: bool,
    /// The platform's reason for its state (Slurm's `Resources`, `Priority` …), when it
    /// gives one.
    pub reason: Option<String>,
    /// Its platform holds it by itself, not for capacity (Slurm's `JobHeldAdmin`,
    /// `Dependency` …: [`crate::backend::WorkerBackend::pending_kind`]): no starting worker of
    /// the pool, and no queue a new one waits behind.
    pub on_hold: bool,
    /// Seconds until its platform expects it to start, when the platform forecasts it
    /// ([`crate::backend::WorkerJob::expected_start`]: Slurm's backfill forecast): while it
    /// is pending, its wait is that and a worker's start-up, whatever its age.
    pub forecast: Option<u64>,
}

impl Starting {
    /// Whether its platform holds it in a queue: pending with a reason.
    pub fn held(&self) -> bool {
        self.pending && self.reason.is_some()
    }

    /// The platform's forecast of its start, while it is pending.
    fn forecast(&self) -> Option<u64> {
        self.forecast.filter(|_| self.pending)
    }

    /// Seconds until it checks in when such a launch takes `typical` seconds and a worker
    /// takes `startup` from its start to its check-in: its platform's forecast and `startup`,
    /// when it has one; else the rest of `typical`, or, still pending past it, about as long
    /// again as it has waited (the one figure a queue gives away without a forecast).
    fn wait(&self, typical: u64, startup: u64) -> u64 {
        if let Some(forecast) = self.forecast() {
            return forecast + startup;
        }
        if self.pending && self.age >= typical {
            self.age
        } else {
            typical.saturating_sub(self.age)
        }
    }
}

impl PoolTimes {
    /// The pool's starting workers bundles may wait for (those not on hold), oldest first.
    fn waiting(&self) -> impl Iterator<Item = &Starting> {
        self.coming.iter().filter(|s| !s.on_hold)
    }

    /// How many starting workers bundles may wait for (not on hold): the pool's first workers
    /// in [`crate::pools::BundleAssignment::worker`]'s numbering.
    pub fn starting(&self) -> usize {
        self.waiting().count()
    }

    /// Starting worker `worker` (not on hold), if it is one.
    pub(crate) fn starting_at(&self, worker: usize) -> Option<&Starting> {
        self.waiting().nth(worker)
    }

    /// Seconds until worker `worker` of the pool checks in (its index as in
    /// [`crate::pools::BundleAssignment::worker`]; pacing aside): a starting one after the
    /// launch → check-in time of its kind (queued by its platform, or not) less its age, or,
    /// pending past it, as long again as it has waited; a new one after the pool's check-in
    /// time, and not before the queued job ahead of it.
    pub fn worker_wait(&self, worker: usize) -> u64 {
        match self.starting_at(worker) {
            Some(starting) => (self.ahead_of(starting))
                .map_or(0, |s| self.wait_of(s))
                .max(self.wait_of(starting)),
            None => (self.ahead())
                .map_or(0, |s| self.wait_of(s))
                .max(self.checkin_seconds),
        }
    }

    /// What [`PoolTimes::worker_wait`] rests on for worker `worker`, in words: "job 12
    /// pending 35 min: Resources" or "a worker checks in in ~2 min".
    pub fn wait_basis(&self, worker: usize) -> String {
        let queued = match self.starting_at(worker) {
            Some(starting) => self.rests_on(starting),
            None => self.ahead(),
        };
        let Some(s) = queued else {
            return format!("a worker checks in in ~{}", minutes(self.checkin_seconds));
        };
        let reason = (s.reason.as_deref()).map_or_else(String::new, |r| format!(": {r}"));
        let learned = match (s.forecast(), self.queued_seconds) {
            (Some(forecast), _) => {
                format!(
                    "; its platform forecasts its start in ~{}",
                    minutes(forecast)
                )
            }
            (None, Some(typical)) if s.held() && s.age < typical => {
                format!("; queued launches took ~{}", minutes(typical))
            }
            _ => String::new(),
        };
        format!("job {} pending {}{reason}{learned}", s.job, minutes(s.age))
    }

    /// Seconds a running (not pending) starting worker is past the launch → check-in time
    /// of its kind, when it is.
    pub(crate) fn overdue_by(&self, starting: &Starting) -> Option<u64> {
        let typical = match self.queued_seconds {
            Some(queued) if starting.held() => queued,
            _ => self.checkin_seconds,
        };
        (!starting.pending && starting.age > typical).then(|| starting.age - typical)
    }

    fn wait_of(&self, starting: &Starting) -> u64 {
        let typical = match self.queued_seconds {
            Some(queued) if starting.held() => queued,
            _ => self.checkin_seconds,
        };
        starting.wait(typical, self.checkin_seconds)
    }

    /// Queued: held by its platform, forecast by it, or pending past the pool's check-in time.
    fn is_queued(&self, starting: &Starting) -> bool {
        starting.held()
            || starting.forecast().is_some()
            || (starting.pending && starting.age >= self.checkin_seconds)
    }

    /// Whether [`PoolTimes::worker_wait`] of worker `worker` rests on its platform's forecast
    /// (of that starting worker, or of the queued one a new worker waits behind).
    pub fn forecast_used(&self, worker: usize) -> bool {
        let starting = match self.starting_at(worker) {
            Some(starting) => self.rests_on(starting),
            None => self
                .ahead()
                .filter(|s| self.wait_of(s) >= self.checkin_seconds),
        };
        starting.is_some_and(|s| s.forecast().is_some())
    }

    /// The queued job ahead of pending `starting` (submitted before it) that it would wait
    /// behind the longest, if any, and if `starting` has no forecast of its own (a queue
    /// starts its jobs in order: a job launched a moment ago on a pool whose older job has
    /// waited an hour does not start in a minute).
    fn ahead_of(&self, starting: &Starting) -> Option<&Starting> {
        if !starting.pending || starting.forecast().is_some() {
            return None;
        }
        self.longest_queued(Some(starting.age))
    }

    /// The job the wait of starting worker `starting` rests on: the queued one ahead of it
    /// when that one's wait is the longer, else itself when it is queued.
    fn rests_on<'a>(&'a self, starting: &'a Starting) -> Option<&'a Starting> {
        let ahead =
            (self.ahead_of(starting)).filter(|ahead| self.wait_of(ahead) > self.wait_of(starting));
        ahead.or(Some(starting).filter(|s| self.is_queued(s)))
    }

    /// The queued job a new launch would wait behind the longest, if any.
    fn ahead(&self) -> Option<&Starting> {
        self.longest_queued(None)
    }

    /// The queued job with the longest wait, among those submitted before a job of age
    /// `older_than` when given (a queue starts its jobs in order).
    fn longest_queued(&self, older_than: Option<u64>) -> Option<&Starting> {
        (self.waiting())
            .filter(|s| older_than.is_none_or(|age| s.age > age) && self.is_queued(s))
            .max_by_key(|s| self.wait_of(s))
    }
}

/// `seconds` in words: "45 s", "4 min", "2 h 5 min" (whole minutes rounded up, so a longer
/// time never reads shorter).
pub fn minutes(seconds: u64) -> String {
    let whole = seconds.div_ceil(60);
    match seconds {
        0..120 => format!("{seconds} s"),
        _ if whole < 120 => format!("{whole} min"),
        _ => format!("{} h {} min", whole / 60, whole % 60),
    }
}

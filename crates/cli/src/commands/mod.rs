//! The tools besides running the manager: `status`, `simulate`, `advise`, `config`, `down`,
//! `completions`, `operator`.

pub mod advise;
pub mod completions;
pub mod config;
pub mod down;
pub mod simulate;
pub mod status;

/// `operator …`: the Kubernetes operator (its own crate), with the manager's logging.
#[cfg(feature = "k8s")]
pub async fn operator(
    args: codalab_wm_operator::command::OperatorArgs,
) -> anyhow::Result<std::process::ExitCode> {
    if args.command.is_none() {
        codalab_wm_app::logging::init(false, Default::default());
    }
    codalab_wm_operator::command::run(args).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

//! `cl-worker-manager operator`: its flags (the binary flattens [`OperatorArgs`] into its
//! command line) and what each form does.

pub use crate::controller::RunArgs;
use codalab_wm_core::error::Result;

/// Run the Kubernetes operator: reconcile the CodaLabWorkerPool objects of the cluster
/// (`operator crd` prints the CustomResourceDefinition to install first)
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OperatorArgs {
    /// `crd`, or nothing to run the controller.
    #[command(subcommand)]
    pub command: Option<OperatorCommand>,
    /// The controller's settings.
    #[command(flatten)]
    pub run: RunArgs,
}

/// What `operator` can do besides running the controller.
#[derive(Debug, clap::Subcommand)]
pub enum OperatorCommand {
    /// Print the CodaLabWorkerPool CustomResourceDefinition (YAML), for `kubectl apply -f -`
    Crd,
}

/// Runs `operator …`.
pub async fn run(args: OperatorArgs) -> Result<()> {
    match args.command {
        Some(OperatorCommand::Crd) => {
            print!("{}", crate::crd::crd_yaml());
            Ok(())
        }
        None => crate::controller::run(args.run).await,
    }
}

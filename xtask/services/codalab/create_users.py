"""Create, or reset the password of, verified CodaLab users directly in the database.

Usage: CODALAB_HOME=<server home> venv/bin/python create_users.py NAME:PASSWORD...

One process for all users (importing codalab takes seconds). The first model() call also creates
the tables on a fresh database (BundleModel.create_tables: metadata.create_all, default groups,
the OAuth clients codalab_cli_client / codalab_worker_client). The root user (the name
CodaLabManager.root_user_name(), 'codalab', with user_id '0') is handled like upstream's
scripts/create-root-user.py; others get is_verified=True, has_access=True (signing up over REST
would need an e-mail confirmation).
"""
import sys
import warnings

warnings.filterwarnings('ignore')

from codalab.lib import crypt_util  # noqa: E402
from codalab.lib.codalab_manager import CodaLabManager  # noqa: E402
from codalab.objects.user import User  # noqa: E402

manager = CodaLabManager()
model = manager.model()
root_name, root_id = manager.root_user_name(), manager.root_user_id()

for spec in sys.argv[1:]:
    name, password = spec.split(':', 1)
    user = model.get_user(username=name, check_active=False)
    if user is None and name == root_name:
        user = model.get_user(user_id=root_id, check_active=False)
    if user is not None:
        model.update_user_info(
            {
                'user_id': user.user_id,
                'user_name': name,
                'password': User.encode_password(password, crypt_util.get_random_string()),
                'has_access': True,
                'is_active': True,
                'is_verified': True,
            }
        )
        print('refreshed user %s (%s)' % (name, user.user_id))
    elif name == root_name:
        model.add_user(name, '', '', '', password, '', user_id=root_id, is_verified=True, has_access=True)
        print('created root user %s (%s)' % (name, root_id))
    else:
        model.add_user(
            name, '%s@example.invalid' % name, '', '', password, '', is_verified=True, has_access=True
        )
        print('created user %s' % name)

from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"

    def ready(self) -> None:
        from chat.evaluation import evaluation_answerer
        from search.evaluation.answers import register_answerer

        register_answerer(evaluation_answerer)
